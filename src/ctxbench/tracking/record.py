"""What a job gives an experiment tracker, read from its folder once the stage is done: the config as flat parameters
(from ``manifest.json``: secrets already redacted, paths relative to the project), tags, the scorers' figures as flat
metrics, the metrics that have steps, and the files to keep as artifacts.

Metric names are ``/``-separated paths, which MLflow, TensorBoard and W&B all group by their first parts:

- run_exp (``summary.json``): ``<method>/<scorer>/<view>/<metric>`` (the mean) with ``.../ci_low`` and
  ``.../ci_high`` (the bootstrap interval), ``<method>/examples``, ``<method>/avg_attribution_s``; with steps, each
  mode's curves (``reporting.curves.step_series``; faithfulness: ``<method>/faithfulness/<view>/deletion_curve``, the
  mean normalised deletion curve of ``deletion_curve_<view>.png``, step = deletion step on its 21-point grid);
- mode=retrieval (``retrieval.json``): ``retrieval/<metric>`` (the job's final ranking, reranked when a reranker is
  set, averaged over its splits) and ``retrieval/<split column>/<ranking>/<metric>`` for each split and ranking;
- sample_and_filter (``funnel.json``): ``funnel/<count>`` and ``funnel/rejections/<reason>``.

Characters MLflow does not allow in a name become ``_`` (``+``) or ``_at_`` (``@``): ``RISE+AP`` is ``RISE_AP``,
``RISE@nonstop`` is ``RISE_at_nonstop``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ctxbench.jobs.results import FUNNEL, MANIFEST, RESULTS, RETRIEVAL_JSON, SUMMARY
from ctxbench.reporting.curves import step_series

STATE = "tracking.json"  # a job's (or a sweep's) tracker run ids, so that a resumed job continues its run
OWN_FILES = (STATE, "metrics.csv", "params.csv")  # what the trackers themselves write into the job folder
# folders whose files are kept as artifacts (large per-example outputs, traces and search results, are not)
ARTIFACT_DIRS = (".hydra", "heatmap_data", "faithfulness", "recovery", "coverage")
_NOT_ALLOWED = re.compile(r"[^\w./\- :]")


def metric_name(*parts: Any) -> str:
    """A metric's name from its path: parts joined with ``/``, characters trackers refuse replaced (module doc)."""
    name = "/".join(str(p) for p in parts).replace("@", "_at_")
    return _NOT_ALLOWED.sub("_", name)


def flatten(obj: Any, prefix: str = "") -> dict[str, str]:
    """A nested config as ``{dotted.key: value}``: scalars as text (None as ``null``), lists as JSON."""
    out: dict[str, str] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, list):
        out[prefix] = json.dumps(obj, default=str)
    else:
        out[prefix] = "null" if obj is None else str(obj)
    return out


@dataclass
class JobRecord:
    """One job's parameters, tags, metrics and artifacts (module doc)."""

    job_dir: Path
    stage: str
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    series: dict[str, list[float]] = field(default_factory=dict)  # metric -> value at step 0, 1, ...
    artifacts: list[Path] = field(default_factory=list)  # relative to job_dir

    @property
    def name(self) -> str:
        return self.job_dir.name


def job_record(job_dir: str | Path, stage: str, *, scorers: Optional[dict] = None,
               views: Optional[list[str]] = None) -> JobRecord:
    """The record of the job in ``job_dir`` (``stage``: the Hydra job name); ``scorers`` and ``views`` (run_exp's
    modes and views) give the metrics with steps."""
    job_dir = Path(job_dir)
    rec = JobRecord(job_dir=job_dir, stage=stage, tags={"stage": stage})
    manifest = _read_json(job_dir / MANIFEST)
    if manifest:
        config = manifest.get("config") or {}
        rec.params = flatten(config)
        commit = (manifest.get("git") or {}).get("commit")
        if commit:
            rec.tags["git_commit"] = commit + ("-dirty" if manifest["git"].get("dirty") else "")
        data = manifest.get("dataset") or {}
        if data.get("name"):
            rec.tags["dataset"] = str(data["name"])
        shas = [data["sha256"]] if data.get("sha256") else [s["sha256"] for s in data.get("splits", []) if
                                                             s.get("sha256")]
        if shas:
            rec.tags["dataset_sha256"] = ",".join(shas)
        if isinstance(config.get("mode"), dict):
            rec.tags["mode"] = ",".join(config["mode"])
    summary = _read_json(job_dir / SUMMARY)
    if summary:
        rec.metrics.update(summary_metrics(summary))
        if scorers:
            records = _read_results(job_dir / RESULTS)
            rec.series.update(step_series(scorers, records, list(views or [])))
    retrieval = _read_json(job_dir / RETRIEVAL_JSON)
    if retrieval:
        rec.metrics.update(retrieval_metrics(retrieval))
    funnel = _read_json(job_dir / FUNNEL)
    if funnel:
        rec.metrics.update(funnel_metrics(funnel))
    rec.artifacts = artifact_files(job_dir)
    return rec


def summary_metrics(summary: dict) -> dict[str, float]:
    """run_exp's ``summary.json`` as flat metrics (module doc)."""
    out: dict[str, float] = {}
    scorers = summary.get("scorers") or {}
    for method, ms in (summary.get("methods") or {}).items():
        for key in ("examples", "avg_attribution_s"):
            if isinstance(ms.get(key), (int, float)):
                out[metric_name(method, key)] = float(ms[key])
        for scorer in scorers:
            for view, metrics in (ms.get(scorer) or {}).items():
                for metric, stat in (metrics or {}).items():
                    if not isinstance(stat, dict) or stat.get("mean") is None:
                        continue
                    base = metric_name(method, scorer, view, metric)
                    out[base] = float(stat["mean"])
                    for bound in ("ci_low", "ci_high"):
                        if stat.get(bound) is not None:
                            out[f"{base}/{bound}"] = float(stat[bound])
    return out


def retrieval_metrics(doc: dict) -> dict[str, float]:
    """mode=retrieval's ``retrieval.json`` as flat metrics (module doc)."""
    out: dict[str, float] = {}
    entries = doc.get("results") or []
    final: dict[str, dict] = {}  # split column -> its last ranking (the reranked one when there is a reranker)
    for e in entries:
        for metric, value in (e.get("metrics") or {}).items():
            out[metric_name("retrieval", e["column"], e["reranker"], metric)] = float(value)
        final[e["column"]] = e
    for metric in {m for e in final.values() for m in e.get("metrics") or {}}:
        values = [e["metrics"][metric] for e in final.values() if metric in e.get("metrics", {})]
        out[metric_name("retrieval", metric)] = float(sum(values) / len(values))
    return out


def funnel_metrics(funnel: dict) -> dict[str, float]:
    """sample_and_filter's ``funnel.json`` as flat metrics (module doc)."""
    out = {metric_name("funnel", k): float(v) for k, v in funnel.items()
           if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out.update({metric_name("funnel", "rejections", k): float(v) for k, v in (funnel.get("rejections") or {}).items()})
    return out


def artifact_files(job_dir: Path) -> list[Path]:
    """The job's files worth keeping beside its run: every file at the top of the folder (lock files and the
    trackers' own files aside) and those of ``ARTIFACT_DIRS``."""
    out = [p for p in sorted(job_dir.iterdir()) if p.is_file() and p.suffix != ".lock" and p.name not in OWN_FILES] \
        if job_dir.is_dir() else []
    for d in ARTIFACT_DIRS:
        if (job_dir / d).is_dir():
            out += sorted(p for p in (job_dir / d).rglob("*") if p.is_file())
    return [p.relative_to(job_dir) for p in out]


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _read_results(path: Path) -> list[dict]:
    from ctxbench.core.jsonl import iter_jsonl

    return [r for _, r in iter_jsonl(path)] if path.exists() else []
