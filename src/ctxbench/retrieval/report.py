"""Retrieval reports (docs/retrieval.md#reports): JSON, and Markdown in FlagEmbedding's layout, for one job or gathered
from many; and the evidence table that puts retrieval Recall@k next to attribution Recall@10% on the same tasks.

An entry is one (model, reranker, dataset-split) cell group: ``{"model", "reranker", "dataset", "split", "column",
"metrics": {key: fraction}, "n_queries", "skipped", "notes"}``. Markdown: one table per metric of ``eval_metrics``,
``| Model | Reranker | average | <columns, sorted> |``, rows sorted, values x100 with 3 decimals, each column's maximum
in bold, ``-`` for a missing cell and an empty average when a row misses a cell.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from ctxbench.core.errors import ConfigError
from ctxbench.reporting.render import render_page
from ctxbench.reporting.results_table import Cell, Table, text_table
from ctxbench.jobs.results import RETRIEVAL_JSON, RETRIEVAL_MD, is_attribution_job, job_dirs
from ctxbench.retrieval.metrics import parse_metric_key

RESULTS_JSON, RESULTS_MD = RETRIEVAL_JSON, RETRIEVAL_MD  # (named in ctxbench.jobs.results)
LABELS = {"ndcg": "NDCG", "map": "MAP", "recall": "Recall", "precision": "P", "mrr": "MRR", "recall_cap": "R_cap"}


def metric_label(key: str) -> str:
    name, k = parse_metric_key(key)
    return f"{LABELS[name]}@{k}"


def _fmt(v: float) -> str:
    return f"{100 * v:.3f}"


def _table(header: list[str], rows: list[list[Optional[float]]], names: list[list[str]], title: str = "") -> Table:
    """Per row its ``names`` cells, the average (empty when None: a cell is missing), then the values (``-`` when
    missing); values x100, each column's maximum in bold."""
    cols = list(zip(*rows)) if rows else []
    best = [max((v for v in c if v is not None), default=None) for c in cols]
    def cell(j: int, v: Optional[float]) -> Cell:
        return Cell("" if j == 0 else "-") if v is None else Cell(_fmt(v), strong=v == best[j])

    return text_table(header, [[*name, *[cell(j, v) for j, v in enumerate(row)]] for name, row in zip(names, rows)],
                      headers=2, title=title)


def metric_tables(entries: list[dict], eval_metrics: Iterable[str]) -> list[Table]:
    """One table per metric (module doc), titled by the metric."""
    columns = sorted({e["column"] for e in entries})
    keys = sorted({(e["model"], e["reranker"]) for e in entries})
    cell = {(e["model"], e["reranker"], e["column"]): e["metrics"] for e in entries}
    out = []
    for metric in eval_metrics:
        rows, names = [], []
        for model, reranker in keys:
            values = [cell.get((model, reranker, c), {}).get(metric) for c in columns]
            avg = None if any(v is None for v in values) else float(np.mean(values))
            rows.append([avg, *values])
            names.append([model, reranker])
        out.append(_table(["Model", "Reranker", "average", *columns], rows, names,
                          title=f"{metric_label(metric)} ({metric}, x100)"))
    return out


def retrieval_markdown(title: str, entries: list[dict], eval_metrics: Iterable[str],
                       evidence: Optional[Table] = None) -> str:
    """A retrieval report's Markdown (``retrieval.md.j2``): the metric tables, the entries' notes, the evidence
    table."""
    return render_page("retrieval.md.j2", title=title, tables=metric_tables(entries, eval_metrics),
                       notes=sorted({n for e in entries for n in e.get("notes", [])}), evidence=evidence)


def write_job_report(output_dir: Path, entries: list[dict], eval_metrics: list[str], extra: dict[str, Any],
                     title: str) -> str:
    """``retrieval.json`` and ``retrieval.md`` of one run_exp job; returns the Markdown."""
    from ctxbench.utils.files import atomic_write_text

    doc = {"eval_metrics": list(eval_metrics), "results": entries, **extra}
    atomic_write_text(Path(output_dir) / RESULTS_JSON, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    md = retrieval_markdown(title, entries, eval_metrics)
    atomic_write_text(Path(output_dir) / RESULTS_MD, md)
    return md


# --- gathering jobs (the report command) ---------------------------------------------------------------------------

def find_retrieval_jobs(paths: Iterable[str | Path]) -> list[Path]:
    """Job dirs holding ``retrieval.json`` at or below the given paths."""
    found = []
    for p in map(Path, paths):
        found += [p] if (p / RESULTS_JSON).is_file() else sorted(f.parent for f in p.rglob(RESULTS_JSON))
    return found


def has_attribution_jobs(path: str | Path) -> bool:
    """Whether an attribution job (finished or not) is at or below ``path``."""
    return any(is_attribution_job(job.read_manifest()) for job in job_dirs(path, must_exist=False))


def gather(jobs: list[Path]) -> tuple[list[dict], list[str]]:
    """Every job's entries (a cell given by two jobs is refused) and the union of their ``eval_metrics``."""
    entries, where, metrics = [], {}, []
    for job in jobs:
        doc = json.loads((job / RESULTS_JSON).read_text(encoding="utf-8"))
        for m in doc["eval_metrics"]:
            if m not in metrics:
                metrics.append(m)
        for e in doc["results"]:
            key = (e["model"], e["reranker"], e["column"])
            if key in where:
                raise ConfigError(f"two runs give {e['model']} / {e['reranker']} on {e['column']}: {where[key]} and "
                                 f"{job}")
            where[key] = job
            entries.append(e)
    return entries, metrics


def evidence_table(entries: list[dict], attribution: list, view: str, eval_metrics: list[str]) -> Optional[Table]:
    """Retrievers (sentence Recall@k of the context-retrieval splits) and attribution methods (token Recall@10% of
    the ``recovery`` mode) as rows, the tasks as columns; None when neither side has a figure."""
    recall_keys = [m for m in eval_metrics if parse_metric_key(m)[0] == "recall"] or ["recall_at_10"]
    rows: dict[tuple[str, str, str], dict[str, float]] = {}
    for e in entries:
        if e["split"] != "context":
            continue
        for key in recall_keys:
            if e["metrics"].get(key) is not None:
                rows.setdefault((f"{e['model']} / {e['reranker']}", "retrieval (sentences)", metric_label(key)),
                                {})[e["dataset"]] = e["metrics"][key]
    for job in attribution:
        desc = job.summary.get("scorers", {}).get("recovery")
        for method, s in job.summary.get("methods", {}).items():
            if desc is None or "recovery" not in s:
                continue
            for m in desc["metrics"]:
                value = s["recovery"].get(view, {}).get(m["key"], {}).get("mean")
                if value is not None:
                    rows.setdefault((method, f"attribution (tokens, {view})", m["label"]), {})[job.dataset] = value
    if not rows:
        return None
    datasets = sorted({d for cells in rows.values() for d in cells})
    keys = sorted(rows, key=lambda k: (k[1], k[0], k[2]))
    values = []
    for k in keys:
        vals = [rows[k].get(d) for d in datasets]
        values.append([None if any(v is None for v in vals) else float(np.mean(vals)), *vals])
    return _table(["Method", "Kind", "Measure", "average", *datasets], values, [list(k) for k in keys])


def write_report(jobs: list[Path], attribution: list, output_dir: str | Path, view: str = "seq") -> tuple[Path, str]:
    """The report command's retrieval part: ``retrieval_report.json`` / ``.md`` in ``output_dir``."""
    from ctxbench.utils.files import atomic_write_text

    entries, metrics = gather(jobs)
    md = retrieval_markdown("Retrieval", entries, metrics, evidence_table(entries, attribution, view, metrics))
    out = Path(output_dir)
    atomic_write_text(out / "retrieval_report.json", json.dumps(
        {"eval_metrics": metrics, "results": entries, "jobs": [str(j) for j in jobs]}, indent=2) + "\n")
    md_path = atomic_write_text(out / "retrieval_report.md", md)
    return md_path, md
