"""Stage 2, run_exp: load examples, attribute with each configured method, score every mode, write results.

Files in the job's output dir: ``manifest.json``, ``results.jsonl`` (one line per example and method; a rerun in the
same dir skips what is there, and refuses lines written under another config), ``summary.json``, ``summary.md``,
``<mode>/<method>.csv`` (FlashTrace's layout), ``deletion_curve_<view>.png``, optional ``heatmaps/`` and ``traces/``,
``heatmap_data/`` (what the page draws of the first ``heatmaps`` examples) and ``report.html`` (docs/report.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from ctxbench.utils import progress
from ctxbench.attribution import Attributor, save_trace
from ctxbench.attribution.memory import GIB, ModelShape, check_fits, free_bytes
from ctxbench.stages.conf import RunConfig, to_plain
from ctxbench.core.errors import ConfigError, DataError, ExampleRefused
from ctxbench.evaluation import check_targets, evaluate_example, prepare_example, view_weights
from ctxbench.utils.files import atomic_write_text, safe_filename
from ctxbench.core.jsonl import AppendOnlyJsonl
from ctxbench.utils.locks import held_elsewhere
from ctxbench.metrics.scorer import build_scorers
from ctxbench.models import load_causal_lm
from ctxbench.models.causal_lm import load_tokenizer
from ctxbench.models.endpoint_lm import EndpointLM, is_endpoint
from ctxbench.core.part import check_stage_config, without_neutral
from ctxbench.core.part import build_all
from ctxbench.retrieval.mode import RetrievalMode
from ctxbench.reporting.html import method_heatmap, write_example_data, write_run_html
from ctxbench.reporting.plots import heatmap_html
from ctxbench.metrics.stats import method_pairs
from ctxbench.reporting.tables import write_job_summary
from ctxbench.jobs.results import RESULTS
from ctxbench.core.shards import Shard
from ctxbench.stages.common import build_dataset, check_length, stage_paths, write_run_manifest
from ctxbench.stages.jobdir import accept as accept_job, nothing_to_do, on_interrupt, shown
from ctxbench.stages.run_shards import base_lines, same_settings, write_shard_record

log = logging.getLogger(__name__)

def config_fingerprint(cfg: DictConfig, method: str) -> str:
    """What makes one method's results on one dataset comparable: data, model, the method's settings, modes, format;
    the parts' neutral fields (``ctxbench.core.part``: batching, chunking, caching) are left out."""
    plain = to_plain(cfg)
    key = {k: plain[k] for k in ("dataset", "model", "mode", "prompt_format", "views", "seed")}
    key["attribution"] = plain["attribution"][method]
    if key["model"].get("tokenizer") is None:
        key["model"].pop("tokenizer", None)  # added after the first results: unset, it reads as before it existed
    key = without_neutral(key)
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _result_key(record: dict) -> str:
    return f"{record['method']}|{record['example_id']}"


def open_results(path: Path, fingerprints: dict[str, str]) -> AppendOnlyJsonl:
    """The per-example results file; lines of a method written under another config are refused, not mixed in."""
    return AppendOnlyJsonl(path, key=_result_key, validate=same_settings(fingerprints, path, "use a new output dir"))


class JobResults:
    """The job's ``results.jsonl``, owned for the whole run: an existing file is checked against this run's settings
    and locked against a second writer when the job starts, before the model loads and before anything of the folder
    changes (a refused rerun leaves it as it was); a new one is created by ``open`` once the job is accepted; the
    lock goes with the ``with`` block, however the run ends."""

    def __init__(self, path: Path, fingerprints: dict[str, str]):
        self.path, self.fingerprints = path, fingerprints
        self.file = open_results(path, fingerprints) if path.exists() else None
        if self.file is None and held_elsewhere(path):  # a job of this folder still loading, no line written yet
            raise DataError("another process is writing this job (the same job running twice?); wait for it to end "
                            "or stop it, then rerun to resume", file=path)

    def open(self) -> AppendOnlyJsonl:
        if self.file is None:
            self.file = open_results(self.path, self.fingerprints)
        return self.file

    def __enter__(self) -> "JobResults":
        return self

    def __exit__(self, *exc) -> None:
        if self.file is not None:
            self.file.close()


@dataclass
class RunPlan:
    """What a run_exp job works on, built and checked before anything is loaded or written (``plan_run``)."""

    cfg: DictConfig
    output_dir: Path
    paths: Any
    model_cfg: Any
    views: tuple[str, ...]
    methods: dict[str, Attributor]
    scorers: dict
    stats: Any
    shard: Shard
    tok: Any
    source: Any
    examples: list  # this shard's examples
    n_total: int  # the examples of the whole run
    with_heatmap: set[str]
    fingerprints: dict[str, str]
    base_done: frozenset = frozenset()  # "method|example" keys the base folder holds (``base=``): not scored here


def run_stage(cfg: DictConfig, output_dir: str | Path) -> dict:
    """Plan the job (every part built and checked, the examples loaded), then, with its results file held: record the
    job, load the model, score the examples not scored yet; then write the summary (or the shard's record)."""
    check_stage_config(cfg, RunConfig)
    progress.set_enabled(cfg.progress)
    delegated = _delegated(cfg, output_dir)
    if delegated is not None:
        return delegated()
    plan = plan_run(cfg, Path(output_dir))
    def record(refresh: bool = False) -> None:
        write_run_manifest(plan.output_dir, to_plain(cfg), stage="run_exp", root=plan.paths.root, source=plan.source,
                           n_examples=plan.n_total, refresh=refresh)

    with JobResults(plan.output_dir / RESULTS, plan.fingerprints) as job:
        # a served model answers its first request before the job is accepted: a refusal (not served, no
        # log-probabilities) leaves the folder as it was, a new one removed, like every other refusal
        served = None if cfg.dry_run else _served_model(plan)
        accept_job()
        record()
        if cfg.dry_run:
            log.info("dry run: configuration composed, parts built, %d examples loaded; no model loaded, no "
                     "attribution", len(plan.examples))
            return {"dry_run": True, "examples": len(plan.examples)}
        results = job.open()  # held from now on, while the model loads: a second run of this job is refused up front
        model = served or _load_model(plan)
        for scorer in plan.scorers.values():
            scorer.use_job_dir(plan.output_dir)
        before = len(results.done)
        try:
            refused = _score_examples(plan, results, model)
        finally:
            if len(results.done) > before:  # results made now (a stopped run's too): the manifest names this commit
                record(refresh=True)
    return _finish(plan, refused)


def _delegated(cfg: DictConfig, output_dir: str | Path):
    """The stage a run_exp job hands over to, as a call, or None: a mode that is a whole evaluation of its own
    (retrieval) runs alone; ``merge=[...]`` joins finished shards."""
    modes = build_all(cfg.mode, "mode")
    own = [m for m in modes.values() if isinstance(m, RetrievalMode)]
    if own:
        if len(modes) > 1:
            raise ConfigError(f"mode: {', '.join(modes)}: retrieval evaluates a retriever, not attributions; run it "
                              f"in a job of its own (mode=retrieval)")
        from ctxbench.stages.retrieval import retrieval_stage

        return lambda: retrieval_stage(cfg, output_dir, own[0])
    if cfg.merge:
        from ctxbench.stages.run_shards import find_shard_dirs, merge_run

        return lambda: merge_run(find_shard_dirs(cfg.merge), output_dir, stats=OmegaConf.to_object(cfg.stats),
                                 base=cfg.base)
    return None


def plan_run(cfg: DictConfig, output_dir: Path) -> RunPlan:
    """Every part built (its settings checked) and the examples loaded and checked, before any model is loaded."""
    paths = stage_paths(cfg)
    model_cfg = OmegaConf.to_object(cfg.model)
    dataset = build_dataset(cfg)
    methods = build_all(cfg.attribution, "attribution", Attributor)
    scorers = build_scorers(cfg.mode)
    stats = OmegaConf.to_object(cfg.stats)
    method_pairs(list(methods), stats.baseline)  # a baseline that is not a method fails before any work
    if model_cfg.backend != "hf":
        _check_served(model_cfg, methods, scorers)
    try:
        shard = Shard(cfg.shard.index, cfg.shard.count)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    tok = load_tokenizer(model_cfg, cache_dir=paths.model_cache_dir)
    check_length(dataset, model_cfg, paths.model_cache_dir)
    # a sampled cache made from other data or for another model's tokenizer is refused, never read in their place
    source, examples = dataset.load(paths, tok, cfg.max_examples, model=to_plain(cfg.model))
    check_targets(examples, source)  # nothing to explain (raw MoreHopQA rows, an empty cache): refused here
    for scorer in scorers.values():
        scorer.check(examples, source.name)
    fingerprints = {name: config_fingerprint(cfg, name) for name in methods}
    if cfg.base and shard.count == 1:
        raise ConfigError(f"base={cfg.base}: a base is for the shards of a split lane (shard.count > 1) and their "
                          f"merge (merge=[...]); a whole run resumes in the task folder itself (resume=<folder>)")
    base_done = frozenset(f"{m}|{e}" for e, m in base_lines(cfg.base, fingerprints)) if cfg.base else frozenset()
    return RunPlan(cfg=cfg, output_dir=output_dir, paths=paths, model_cfg=model_cfg, views=tuple(cfg.views),
                   methods=methods, scorers=scorers, stats=stats, shard=shard, tok=tok, source=source,
                   examples=shard.select(examples), n_total=len(examples),
                   # by position in the dataset, shard or not
                   with_heatmap={e.example_id for e in examples[:cfg.heatmaps]},
                   fingerprints=fingerprints, base_done=base_done)


def _check_served(model_cfg, methods: dict, scorers: dict) -> None:
    """A served model (``model=openai``, ``vllm``) gives log-probabilities only: the methods and modes that need its
    weights or activations are refused here, before any request, in one line naming those that can run."""
    white = [f"attribution.{n}" for n, m in methods.items() if m.needs_model and not m.log_probs_only]
    white += [f"mode.{n}" for n, s in scorers.items() if s.needs_model and not s.log_probs_only]
    if white:
        raise ConfigError(f"model={model_cfg.name} is served ({model_cfg.base_url}): {', '.join(white)} need the "
                          f"model's weights; with a served model choose among the black-box methods "
                          f"({', '.join(_served_options('attribution'))}) and the modes "
                          f"{', '.join(_served_options('mode'))}")
    if not model_cfg.tokenizer:
        raise ConfigError("model.tokenizer: a served model's tokenizer gives the token spans; name it (a hub id, a "
                          "folder or pypkg:<package>, e.g. model.tokenizer=Qwen/Qwen3-8B)")
    if model_cfg.api_key_env and not os.environ.get(model_cfg.api_key_env):
        raise ConfigError(f"model.api_key_env={model_cfg.api_key_env}: the environment variable is not set (export "
                          f"it, or model.api_key_env=null for a server without authentication)")


def _served_options(group: str) -> list[str]:
    """The options of the ``attribution`` or ``mode`` group a served model can run: their classes (the schemas'
    ``_target_``) need no model, or only its log-probabilities."""
    from hydra.core.config_store import ConfigStore
    from hydra.utils import get_class

    from ctxbench.stages.conf import register_configs

    if group not in ConfigStore.instance().repo.get("schema", {}):
        register_configs()  # a config made without Hydra's composition
    entries = ConfigStore.instance().repo["schema"][group]
    classes = {name.removesuffix(".yaml"): get_class(e.node["_target_"]) for name, e in entries.items()}
    return sorted(n for n, c in classes.items()
                  if hasattr(c, "log_probs_only") and (c.log_probs_only or not c.needs_model))


def _needs_model(plan: RunPlan) -> bool:
    return any(p.needs_model for p in (*plan.methods.values(), *plan.scorers.values()))


def _served_model(plan: RunPlan):
    """A served model's scoring client, checked by one request (``models.endpoint_lm``); None for a local model or
    when no method or mode needs one."""
    mc, ep = plan.model_cfg, plan.cfg.endpoint
    if mc.backend == "hf" or not _needs_model(plan):
        return None
    served = EndpointLM(mc.base_url, mc.model_name, plan.tok, api_key_env=mc.api_key_env, timeout_s=mc.timeout_s,
                        max_retries=ep.max_retries, concurrency=ep.concurrency,
                        prompts_per_request=ep.prompts_per_request,
                        cache_dir=plan.output_dir / "endpoint" if ep.cache else None)
    served.check()
    log.info("model %s served at %s: the scoring passes run there", mc.model_name, mc.base_url)
    return served


def _load_model(plan: RunPlan):
    """The local model, or None when no method or mode needs one (controls with recovery: the tokenizer is
    enough)."""
    if not _needs_model(plan):
        log.info("controls only (%s) with model-free modes (%s): no model weights loaded, tokenizer only",
                 ", ".join(plan.methods), ", ".join(plan.scorers))
        return None
    loaded = load_causal_lm(plan.model_cfg, need_attentions=True, cache_dir=plan.paths.model_cache_dir)
    log.info("model %s on %s (%s)", plan.model_cfg.name, loaded.device, loaded.model.dtype)
    return loaded.model


def _score_examples(plan: RunPlan, results: AppendOnlyJsonl, model) -> list[tuple[str, str]]:
    """Score every (example, method) not in ``results`` yet, appending each record as it is scored; the examples
    refused by their preparation, ``(example id, reason)``."""
    methods, examples = plan.methods, plan.examples
    on_interrupt(lambda: _kept(results, examples, list(methods), results.path))
    todo = {e.example_id: [m for m in methods if f"{m}|{e.example_id}" not in results
                           and f"{m}|{e.example_id}" not in plan.base_done] for e in examples}
    todo = {k: v for k, v in todo.items() if v}
    if not todo:
        nothing_to_do()  # every result is there: the job's record stays the one of the run that made them
    said = resume_line(len(examples), len(methods), [len(v) for v in todo.values()])
    if said:
        log.info(said)
    ready, refused = [], []
    for ex in (e for e in examples if e.example_id in todo):
        try:
            ready.append((ex, prepare_example(ex, plan.tok, plan.cfg.prompt_format)))
        except ExampleRefused as exc:
            refused.append((ex.example_id, str(exc)))
            log.warning("skipped: %s", exc)
    if model is not None and not is_endpoint(model):  # before the first example
        check_context(model, [(ex.example_id, p.model_input) for ex, p in ready], plan.cfg.length)
    if plan.cfg.memory_check and model is not None and not is_endpoint(model):
        _check_memory(model, [p.model_input for _, p in ready],
                      {m: methods[m] for m in methods if any(m in todo[ex.example_id] for ex, _ in ready)},
                      plan.scorers, plan.cfg.memory_budget_gib)
    if refused and len(refused) == len(todo):
        raise ExampleRefused(f"every example was refused; first reason: {refused[0][1]}")
    # one step of the bar per (example, method); its label names the method and the step under way (an example
    # takes minutes on a CPU), its postfix the real time per example (attribution and every scoring step)
    bar = progress.bar(sum(len(todo[ex.example_id]) for ex, _ in ready), f"run_exp {plan.source.name}", "method",
                       leave=True)
    per_example: list[float] = []
    for n, (ex, prepared) in enumerate(ready, 1):
        t0 = time.perf_counter()
        pending = {m: methods[m] for m in todo[ex.example_id]}

        def on_step(method: str, step: str, n=n) -> None:
            bar.set_description(f"run_exp {plan.source.name} example {n}/{len(ready)} {method}: {step}")

        _score_example(plan, results, model, prepared, pending, on_step, bar)
        per_example.append(time.perf_counter() - t0)
        bar.set_postfix_str(f"{sum(per_example) / len(per_example):.1f} s/example")
        log.info("example %s (%d of %d): %d method%s in %.1f s", ex.example_id, n, len(ready), len(pending),
                 "s" * (len(pending) != 1), per_example[-1])
    bar.close()
    return refused


def _score_example(plan: RunPlan, results: AppendOnlyJsonl, model, prepared, pending: dict, on_step, bar) -> None:
    """One example's pending methods. Each method's record is written as soon as it is scored: a run stopped
    mid-example (a Table-1 example takes most of an hour on a CPU) resumes at the next method, not at the example's
    first; its heat maps are written before the record, which marks the method done."""
    ex = prepared.example
    decoded = _decoded(plan.tok, prepared) if ex.example_id in plan.with_heatmap else None
    for method, result, record in evaluate_example(model, plan.tok, prepared, pending, plan.scorers, plan.views,
                                                   on_step):
        record["config"] = plan.fingerprints[method]
        if decoded is not None:
            _write_heatmap(plan.output_dir, decoded, prepared, result, method, plan.views[0])
            _write_heatmap_data(plan.output_dir, decoded, prepared, method, result, plan.views)
        results.append(record)
        if plan.cfg.save_traces:
            save_trace(plan.output_dir / "traces" / method, ex.example_id, result)
        bar.update(1)


def _finish(plan: RunPlan, refused: list[tuple[str, str]]) -> dict:
    """The job's summary files (and report.html), or for one shard of several its record: the merge writes the
    summary of the whole run."""
    shard, examples = plan.shard, plan.examples
    reasons, refused_ids = [r for _, r in refused], [i for i, _ in refused]
    if shard.count > 1:
        write_shard_record(plan.output_dir, shard.index, shard.count, plan.n_total, [e.example_id for e in examples],
                           refused_ids, reasons)
        log.info("shard %d of %d done: %d examples; merge with run_exp merge=[<dirs>]", shard.index, shard.count,
                 len(examples))
        return {"shard": [shard.index, shard.count], "examples": len(examples)}
    title = f"run_exp: {plan.source.name}, {plan.model_cfg.name}, {len(examples)} examples"
    summary = write_job_summary(plan.output_dir, list(plan.methods), plan.scorers, list(plan.views), title=title,
                                refused=reasons, stats=plan.stats)
    if plan.cfg.html:
        write_run_html(plan.output_dir, title, plan.cfg.heatmaps)
    return summary


def check_context(model, inputs: list, length: Any = None) -> None:
    """Refuse, in one line naming both numbers, an input longer than the model's positions
    (``config.max_position_embeddings``): a model past its context explains nothing it was trained to read."""
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if not limit or not inputs:
        return
    example_id, mi = max(inputs, key=lambda t: int(t[1].input_ids.numel()))
    T = int(mi.input_ids.numel())
    if T > int(limit):
        raise ConfigError(f"length={length}: example {example_id} is {T:,} tokens with its generation, more than the "
                          f"model's {int(limit):,} positions (config.max_position_embeddings); use length<={limit} "
                          f"less the prompt template and the generation")


def _check_memory(model, inputs: list, methods: dict[str, Attributor], scorers: dict,
                  budget_gib: Optional[float]) -> None:
    """Refuse, in one line, the methods and modes whose estimated memory on the longest input (and the most generated
    tokens) is above the memory free now, with the model loaded (or above ``budget_gib``)."""
    if not inputs:
        return
    shape = ModelShape.of(model)
    T = max(int(mi.input_ids.numel()) for mi in inputs)
    G = max(int(mi.G) for mi in inputs)
    needs = [(f"attribution.{name}", m.memory_need(shape, T, G)) for name, m in methods.items()]
    needs += [(f"mode.{name}", s.memory_need(shape, T, G)) for name, s in scorers.items()]
    if budget_gib is None:
        free, where = free_bytes(next(model.parameters()).device)
    else:
        free, where = int(budget_gib * GIB), "memory_budget_gib"
    check_fits(needs, T, G, free, where)


def resume_line(n_examples: int, n_methods: int, pending: list[int]) -> Optional[str]:
    """What a rerun finds already scored (``pending``: the methods left of each example with any left), None when it
    starts afresh: whole examples, and the method results of examples a stop cut short (a kill mid-example)."""
    whole = n_examples - len(pending)
    partial = [n_methods - p for p in pending if p < n_methods]
    if not whole and not partial:
        return None
    if whole == n_examples:
        return f"nothing to do: all {n_examples} examples already scored by every method"
    line = f"resuming: {whole} of {n_examples} examples already scored"
    if partial:
        line += (f", and {sum(partial)} method result{'s' * (sum(partial) != 1)} of {len(partial)} unfinished "
                 f"example{'s' * (len(partial) != 1)} (those methods are not run again)")
    return line


def _kept(results: AppendOnlyJsonl, examples, methods: list[str], path: Path) -> str:
    """What an interrupted run keeps (the start of its one line)."""
    done = [sum(f"{m}|{e.example_id}" in results for m in methods) for e in examples]
    whole, partial = sum(d == len(methods) for d in done), sum(d for d in done if d < len(methods))
    more = f" (and {partial} method result{'s' * (partial != 1)} of unfinished examples)" if partial else ""
    return (f"{whole} of {len(examples)} examples × {len(methods)} method{'s' * (len(methods) != 1)} kept{more} in "
            f"{shown(path)}")


def _decoded(tok, prepared) -> tuple[list[str], list[str]]:
    """The prompt and generated tokens, one string each."""
    mi = prepared.model_input
    return ([tok.decode([int(mi.input_ids[p])]) for p in mi.prompt_positions],
            [tok.decode([int(t)]) for t in mi.gen_ids])


def _write_heatmap_data(output_dir: Path, decoded, prepared, method: str, result, views) -> None:
    """What report.html draws of this example: tokens, gold evidence, and each method's views and hops (added to the
    example's file method by method). ``decoded``: ``_decoded``'s prompt and generated tokens."""
    tokens, generated = decoded
    write_example_data(output_dir, prepared.example.example_id, tokens=tokens, generated=generated,
                       gold=prepared.evidence_tokens, sink_span=prepared.sink_span,
                       methods={method: method_heatmap(result, view_weights(result, prepared.sink_span, views))})


def _write_heatmap(output_dir: Path, decoded, prepared, result, method: str, view: str) -> None:
    """The example's heat-map page in the run's first view (the rows a per-token method computed are those the run's
    views read, so another view could see rows that were never filled)."""
    w = view_weights(result, prepared.sink_span, [view])[view]
    tokens, generated = decoded
    page = heatmap_html(tokens, w, title=f"{method} on {prepared.example.example_id} ({view} view)",
                        gold=prepared.evidence_tokens or (), generated=generated)
    path = output_dir / "heatmaps" / method / f"{safe_filename(prepared.example.example_id)}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, page)


