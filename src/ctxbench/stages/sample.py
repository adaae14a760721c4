"""Stage 1, sample_and_filter (docs/sampling.md): for each dataset row, retrieve in-context examples, render the prompt,
generate "chain of thought + \\box{answer}", check the format, judge the boxed answer, and keep the judged-correct
generations as CachedExample rows with their token spans, in an append-only cache that a rerun resumes.

Files: the cache (``cache`` or ``<paths.samples_dir>/<dataset>.jsonl``; shard i of n: ``<name>.shard-<i>-of-<n>.jsonl``)
with its settings record and processing log (``ctxbench.sampling.cache``); in the job dir ``manifest.json`` and
``funnel.json`` (generated / well-formed / judged correct / kept, rejection reasons).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from ctxbench.utils import progress
from ctxbench.stages.conf import SampleConfig, to_plain
from ctxbench.datasets.base import file_fingerprint
from ctxbench.core.errors import ConfigError
from ctxbench.example import CachedExample
from ctxbench.utils.files import atomic_write_text
from ctxbench.generators.base import GenerationRequest, Generator
from ctxbench.models import load_causal_lm
from ctxbench.models.causal_lm import load_tokenizer
from ctxbench.core.part import check_stage_config
from ctxbench.core.part import build
from ctxbench.retrievers.few_shot import few_shot_prompts
from ctxbench.prompts.icl import ICLTemplate
from ctxbench.retrievers.base import Retriever
from ctxbench.retrievers.pool import default_pool_path, example_rows, load_pool
from ctxbench.sampling.attach import attach_spans
from ctxbench.boxed import split_boxed_generation
from ctxbench.sampling.cache import SampleCache, check_config, funnel, merge_shards
from ctxbench.sampling.judges import Judge, JudgeItem
from ctxbench.core.shards import Shard
from ctxbench.stages.common import (build_dataset, build_template, check_length, stage_paths,
                                    write_run_manifest)
from ctxbench.stages.jobdir import accept as accept_job, nothing_to_do, on_interrupt, shown

log = logging.getLogger(__name__)


def cache_path(cfg: DictConfig, dataset_name: str) -> Path:
    return Path(cfg.cache) if cfg.cache else Path(cfg.paths.samples_dir) / f"{dataset_name}.jsonl"


def settings_record(cfg: DictConfig, source_sha: str, pool_path: Path, parts: dict[str, Any]) -> dict[str, Any]:
    """What changes the generations: a cache made under other settings is never appended to. ``parts``: the
    generator's, judge's and retriever's ``settings()`` (their neutral fields, such as batch sizes, left out)."""
    plain = to_plain(cfg)
    model = {k: v for k, v in plain["model"].items() if k not in ("api_key_env", "timeout_s")}
    return {"dataset": {**plain["dataset"], "sha256": source_sha}, "length": plain["length"], "model": model,
            "template": plain["template"], "pool_sha256": file_fingerprint(pool_path), **parts}


def sample_rows(rows: list[CachedExample], query_rows: list[dict], *, retriever: Retriever, pool: list[dict],
                template: ICLTemplate, tokenizer, generator: Generator, judge: Judge, cache: SampleCache,
                max_examples: Optional[int], chunk: int) -> int:
    """The loop over one slice of the dataset, chunk by chunk, until every row is processed or ``max_examples``
    examples are kept; the number of rows processed now."""
    pending = [(ex, q) for ex, q in zip(rows, query_rows) if not cache.processed(ex.example_id)]
    if len(pending) < len(rows):
        log.info("resuming: %d of %d rows already processed, %d examples kept", len(rows) - len(pending), len(rows),
                 cache.kept)
    bar = progress.bar(len(pending), f"sample {cache.path.stem}", "row", leave=True)
    processed = 0
    for start in range(0, len(pending), chunk):
        if max_examples is not None and cache.kept >= max_examples:
            break
        part = pending[start:start + chunk]
        t0 = time.perf_counter()
        shots = few_shot_prompts(retriever, template, pool, [q for _, q in part], tokenizer)
        gens = generator.generate([GenerationRequest(ex.example_id, fs.prompt.messages or
                                                     [{"role": "user", "content": fs.prompt.text}], fs.prompt.text,
                                                     row=ex)
                                   for (ex, _), fs in zip(part, shots)])
        splits = [split_boxed_generation(g.text) if g.ok else None for g in gens]
        to_judge = [i for i, sp in enumerate(splits) if sp is not None and sp.ok]
        verdicts = dict(zip(to_judge, judge.judge([JudgeItem(
            splits[i].answer, str(part[i][0].metadata.get("reference_answer", "")),
            part[i][0].prompt.rsplit("\n", 1)[-1]) for i in to_judge])))
        # the chunk's rows are generated and judged together: each row is charged an equal share of its wall time
        # (a chunk cut short by max_examples leaves the share of its unrecorded rows out)
        seconds = round((time.perf_counter() - t0) / len(part), 3)
        for i, ((ex, _), fs, g) in enumerate(zip(part, shots, gens)):
            entry: dict[str, Any] = {"retrieved_ids": fs.ids, "prompt": fs.prompt.to_dict(),
                                     "generation": g.to_dict(), "seconds": seconds}
            kept = None
            if not g.ok:
                entry.update(status="generation_error", reason=g.error)
            elif not splits[i].ok:
                entry.update(status="malformed", reason=splits[i].reason)
            elif verdicts[i].error:
                entry.update(status="judge_error", reason=verdicts[i].error)
            elif not verdicts[i].correct:
                entry.update(status="judged_wrong", reason="judged_wrong", judge_response=verdicts[i].response)
            else:
                kept = attach_spans(ex, splits[i].thinking, splits[i].answer, tokenizer,
                                    judge_response=verdicts[i].response, retrieved_ids=entry["retrieved_ids"],
                                    generation_prompt=fs.prompt.text,
                                    **({"generation_forced": g.forced} if g.forced else {}))
                entry.update(status="kept" if kept else "no_span_tokens",
                             reason=None if kept else "no target token overlaps the answer")
            if kept is not None and max_examples is not None and cache.kept >= max_examples:
                break  # the first max_examples kept rows are enough; the rest of the chunk stays unprocessed
            cache.record(ex.example_id, entry, kept)
            processed += 1
            bar.update(1)
    bar.close()
    return processed


def sample_stage(cfg: DictConfig, output_dir: str | Path) -> dict:
    """Build every part, load the rows and the model the parts run; then merge finished shards (``merge=true``) or
    generate, judge and keep the rows not processed yet into the cache."""
    check_stage_config(cfg, SampleConfig)
    progress.set_enabled(cfg.progress)
    paths = stage_paths(cfg)
    # Every part is built (and its settings checked) before anything is loaded.
    dataset = build_dataset(cfg)
    parts = {"generator": build(cfg.generator, "generator", Generator), "judge": build(cfg.judge, "judge", Judge),
             "retriever": build(cfg.retriever, "retriever", Retriever)}
    template = build_template(cfg)
    try:
        shard = Shard(cfg.shard.index, cfg.shard.count)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    check_length(dataset, OmegaConf.to_object(cfg.model), paths.model_cache_dir)  # before the model loads
    loaded, tokenizer = _model_and_tokenizer(cfg, paths, parts.values())
    # Sampling reads the raw data, never a cache of its own output.
    # the first max_rows rows, before sharding: shards split the same first rows
    source, examples = dataset.load(paths, tokenizer, cfg.max_rows, use_cache=False)
    parts["generator"].check(examples, dataset.name)
    cache = cache_path(cfg, dataset.name)

    def accept_and_record() -> None:
        """The run is accepted (ctxbench.stages.jobdir): its first write into the job folder."""
        accept_job()
        write_run_manifest(output_dir, to_plain(cfg), stage="sample_and_filter", root=paths.root, source=source,
                           n_examples=len(examples), extra={"cache": str(cache), "shard": [shard.index, shard.count]})

    if cfg.merge:
        merged = merge_shards(cache, shard.count, [e.example_id for e in examples], cfg.max_examples)
        accept_and_record()
        log.info("merged %d shards into %s: %d examples kept of %d rows", merged["shards"], cache, merged["kept"],
                 merged["rows"])
        return _finish(output_dir, cache)
    pool_path, pool = _fitted_pool(cfg, parts["retriever"])
    settings = settings_record(cfg, source.record(len(examples))["sha256"], pool_path,
                               {name: part.settings() for name, part in parts.items()})
    path = shard.path(cache)
    check_config(path, settings, record_new=False)  # a cache of other settings is refused before the folder changes
    accept_and_record()
    if cfg.dry_run:
        log.info("dry run: %d rows, pool of %d, parts built; nothing generated", len(examples), len(pool))
        return {"dry_run": True, "examples": len(examples)}
    for part in parts.values():
        if part.needs_lm:
            part.use_lm(loaded)  # None: an endpoint model, which a part that must run it locally refuses
    parts["retriever"].use_template(template)
    rows = shard.select(examples)
    with SampleCache(path, settings) as store:
        on_interrupt(lambda: f"{sum(store.processed(e.example_id) for e in rows)} of {len(rows)} rows processed, "
                             f"{store.kept} examples kept in {shown(path)}")
        # ids and positions in the whole dataset, before sharding
        done = sample_rows(rows, shard.select(example_rows(examples)), pool=pool, template=template,
                           tokenizer=tokenizer, cache=store, max_examples=cfg.max_examples, chunk=cfg.chunk, **parts)
        store.finish()
    if not done:
        _nothing_to_do(store.kept, cfg.max_examples)
    return _finish(output_dir, path)


def _nothing_to_do(kept: int, max_examples: Optional[int]) -> None:
    log.info("nothing to do: the cache holds every row this run asks for (%d examples kept%s)", kept,
             f", max_examples={max_examples}" if max_examples is not None else "")
    nothing_to_do()  # every row needed is in the cache: the job's record stays the one of the run that made it


def _fitted_pool(cfg: DictConfig, retriever: Retriever) -> tuple[Path, list[dict]]:
    """The in-context example pool (``pool=``, else the packaged one), the retriever fitted on it."""
    pool_path = Path(cfg.pool) if cfg.pool else default_pool_path()
    pool = load_pool(pool_path)
    try:
        retriever.fit(pool)
    except ValueError as exc:
        raise ConfigError(f"retriever: {exc}") from exc
    return pool_path, pool


def _model_and_tokenizer(cfg: DictConfig, paths, parts) -> tuple:
    """``(loaded model or None, tokenizer)``: the model group's tokenizer makes the spans (of the model run_exp will
    explain); the model itself is loaded only when a part runs it, and never by a dry run."""
    model_cfg = OmegaConf.to_object(cfg.model)
    local = model_cfg.backend == "hf"
    needs_lm = local and any(part.needs_lm for part in parts)
    loaded = load_causal_lm(model_cfg, cache_dir=paths.model_cache_dir) if needs_lm and not cfg.dry_run else None
    tokenizer = loaded.tokenizer if loaded else (load_tokenizer(model_cfg, cache_dir=paths.model_cache_dir)
                                                 if local or model_cfg.tokenizer else None)
    if tokenizer is None:
        raise ConfigError("model: spans need a local tokenizer: set the model group to the model run_exp will "
                          "explain (backend hf, or a served model with model.tokenizer) and generate with "
                          "generator=openai")
    return loaded, tokenizer


def _finish(output_dir: str | Path, path: Path) -> dict:
    counts = funnel(path)
    atomic_write_text(Path(output_dir) / "funnel.json", json.dumps({"cache": str(path), **counts}, indent=2) + "\n")
    reasons = ", ".join(f"{k} {v}" for k, v in counts["rejections"].items()) or "none"
    print(f"{path}: {counts['processed']} rows processed, {counts['generated']} generated, {counts['well_formed']} "
          f"well-formed ({counts['box_forced']} with box markup forced), {counts['judged_correct']} judged correct, "
          f"{counts['kept']} kept; rejections: {reasons}")
    return {"cache": str(path), **counts}
