"""Stage 2, run_exp: load examples, attribute with each configured method, score every mode, write results.

Files in the job's output dir: ``manifest.json``, ``results.jsonl`` (one line per example and method; a rerun in the same
dir skips what is there, and refuses lines written under another config), ``summary.json``, ``summary.md``,
``<mode>/<method>.csv`` (the reference's layout), ``deletion_curve_<view>.png``, optional ``heatmaps/`` and ``traces/``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from ctxbench.attribution import build_attributor, save_trace
from ctxbench.conf import AttributionConfig, to_plain
from ctxbench.errors import DataError
from ctxbench.evaluation import (ExampleRefused, ModeSettings, check_modes_supported, evaluate_example,
                                 prepare_example, view_weights)
from ctxbench.jsonl import AppendOnlyJsonl, iter_jsonl
from ctxbench.models import load_causal_lm
from ctxbench.reporting.plots import deletion_curve_plots, heatmap_html
from ctxbench.reporting.tables import markdown_summary, summarize, write_mode_csvs
from ctxbench.stages.common import load_examples, write_run_manifest

log = logging.getLogger(__name__)

RESULTS = "results.jsonl"


def attributor_params(acfg: AttributionConfig) -> dict[str, Any]:
    """The method's own parameters from the shared schema (the rest of the schema belongs to other methods)."""
    from ctxbench.attribution.base import method_parameters

    accepted = method_parameters(acfg.method)
    return {k: v for k, v in asdict(acfg).items() if k in accepted}


def mode_settings(cfg: DictConfig) -> ModeSettings:
    modes = {k: dict(v) for k, v in to_plain(cfg.mode).items()}
    unknown = set(modes) - {"faithfulness", "recovery", "coverage"}
    if unknown:
        raise ValueError(f"run_exp: mode(s) {sorted(unknown)} are not attribution modes (faithfulness, recovery, coverage)")
    if not modes:
        raise ValueError("run_exp: no mode selected (mode=faithfulness, recovery or coverage)")
    return ModeSettings(views=tuple(cfg.views), faithfulness=modes.get("faithfulness"),
                        recovery=modes.get("recovery"), coverage=modes.get("coverage"))


def config_fingerprint(cfg: DictConfig, method: str) -> str:
    """What makes one method's results on one dataset comparable: data, model, the method's settings, modes, format."""
    plain = to_plain(cfg)
    key = {k: plain[k] for k in ("dataset", "model", "mode", "prompt_format", "views", "seed")}
    key["attribution"] = plain["attribution"][method]
    key["dataset"] = {k: v for k, v in key["dataset"].items() if k not in ("num_samples", "generate_missing")}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _result_key(record: dict) -> str:
    return f"{record['method']}|{record['example_id']}"


def open_results(path: Path, fingerprints: dict[str, str]) -> AppendOnlyJsonl:
    """The per-example results file; lines of a method written under another config are refused, not mixed in."""

    def check(obj: dict, lineno: int) -> None:
        method = obj.get("method")
        if method in fingerprints and obj.get("config") != fingerprints[method]:
            raise DataError(f"written for method {method!r} under another configuration ({obj.get('config')} != "
                            f"{fingerprints[method]}); use a new output dir", file=path, line=lineno, field="config")

    return AppendOnlyJsonl(path, key=_result_key, validate=check)


def run_stage(cfg: DictConfig, output_dir: str | Path) -> dict:
    output_dir = Path(output_dir)
    paths = OmegaConf.to_object(cfg.paths)
    model_cfg = OmegaConf.to_object(cfg.model)
    modes = mode_settings(cfg)
    methods: dict[str, AttributionConfig] = {k: OmegaConf.to_object(v) for k, v in cfg.attribution.items()}
    if not methods:
        raise ValueError("run_exp: no attribution method selected (attribution=ifr_multi_hop, ...)")
    loaded = load_causal_lm(model_cfg, need_attentions=True, cache_dir=paths.cache_dir)
    model, tok = loaded.model, loaded.tokenizer
    log.info("model %s on %s (%s)", model_cfg.name, loaded.device, loaded.model.dtype)
    source, examples = load_examples(OmegaConf.to_object(cfg.dataset), paths, tok, cfg.max_examples)
    write_run_manifest(output_dir, to_plain(cfg), stage="run_exp", root=paths.root, source=source,
                       n_examples=len(examples))
    if cfg.dry_run:
        log.info("dry run: configuration composed, %d examples loaded, model loaded; no attribution was run",
                 len(examples))
        return {"dry_run": True, "examples": len(examples)}
    check_modes_supported(examples, modes, source.name)

    attributors = {name: build_attributor(a.method, **attributor_params(a)) for name, a in methods.items()}
    fingerprints = {name: config_fingerprint(cfg, name) for name in methods}
    results_path = output_dir / RESULTS
    refused = []
    with open_results(results_path, fingerprints) as results:
        todo = [e for e in examples if any(f"{m}|{e.example_id}" not in results for m in methods)]
        if len(todo) < len(examples):
            log.info("resuming: %d of %d examples already scored", len(examples) - len(todo), len(examples))
        for i, ex in enumerate(tqdm(todo, desc=f"run_exp {source.name}", disable=not cfg.progress)):
            try:
                prepared = prepare_example(ex, tok, cfg.prompt_format, need_gold=modes.recovery is not None)
            except ExampleRefused as exc:
                refused.append(str(exc))
                log.warning("skipped: %s", exc)
                continue
            pending = {m: a for m, a in attributors.items() if f"{m}|{ex.example_id}" not in results}
            for method, (result, record) in evaluate_example(model, tok, prepared, pending, modes).items():
                record["config"] = fingerprints[method]
                results.append(record)
                if methods[method].save_traces:
                    save_trace(output_dir / "traces" / method, ex.example_id, result)
                if i < cfg.heatmaps:
                    _write_heatmap(output_dir, tok, prepared, result, method)
    if refused and len(refused) == len(todo):
        raise ExampleRefused(f"every example was refused; first reason: {refused[0]}")
    return write_reports(output_dir, list(methods), list(modes.views), title=f"run_exp: {source.name}, "
                         f"{model_cfg.name}, {len(examples)} examples", refused=refused)


def _write_heatmap(output_dir: Path, tok, prepared, result, method: str) -> None:
    mi = prepared.model_input
    w = view_weights(result, prepared.sink_span, ["seq"])["seq"]
    tokens = [tok.decode([int(mi.input_ids[p])]) for p in mi.prompt_positions]
    generated = [tok.decode([int(t)]) for t in mi.gen_ids]
    page = heatmap_html(tokens, w, title=f"{method} on {prepared.example.example_id} (seq view)",
                        gold=prepared.gold_tokens or (), generated=generated)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in prepared.example.example_id)
    path = output_dir / "heatmaps" / method / f"{safe}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")


def write_reports(output_dir: Path, methods: list[str], views: list[str], *, title: str,
                  refused: list[str] = ()) -> dict:
    records = [r for _, r in iter_jsonl(output_dir / RESULTS) if r["method"] in methods] \
        if (output_dir / RESULTS).exists() else []
    summary = summarize(records, views)
    (output_dir / "summary.json").write_text(json.dumps({"methods": summary, "views": views,
                                                          "refused": list(refused)}, indent=2) + "\n")
    write_mode_csvs(output_dir, summary, views)
    md = markdown_summary(summary, views, title)
    (output_dir / "summary.md").write_text(md + "\n", encoding="utf-8")
    deletion_curve_plots(records, views, output_dir)
    print(md)
    return summary
