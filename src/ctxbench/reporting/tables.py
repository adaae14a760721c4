"""A run_exp job's own summary files: ``summary.json`` (the figures of ``metrics.summary``), ``summary.md`` and the
files FlashTrace's code writes (CSV per mode and method)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from ctxbench.core.jsonl import iter_jsonl
from ctxbench.metrics.recovery import RecoveryScorer
from ctxbench.metrics.scorer import VIEW_LABELS, Scorer
from ctxbench.metrics.stats import StatsSettings
from ctxbench.metrics.summary import run_summary
from ctxbench.reporting.curves import mode_plots
from ctxbench.reporting.render import render_page
from ctxbench.reporting.results_table import comparison_tables, rows_from_summary, summary_tables
from ctxbench.jobs.results import JobFiles
from ctxbench.utils.files import atomic_write_text


def mode_csv_rows(scorer: Scorer, summary: dict[str, Any], views: list[str]) -> list[list[str]]:
    """FlashTrace's per-method CSV of one mode: a header of metric labels, ``<View> Attr <csv_label> Mean`` rows,
    then the ``<csv_std_label>`` rows, (recovery: the examples used and skipped,) then the average attribution
    time."""
    agg, metrics = summary[scorer.name], scorer.csv_metrics()
    recovery = isinstance(scorer, RecoveryScorer)
    # FlashTrace heads its recovery column "Recovery@10%"
    rows = [["Method", *[f"Recovery@{scorer.fraction * 100:g}%" if recovery else m.label for m in metrics]]]
    for stat, stat_name in (("mean", "Mean"), ("std", scorer.csv_std_label)):
        rows += [[f"{VIEW_LABELS[v]} Attr {scorer.csv_label} {stat_name}",
                  *[_fmt(agg[v][m.key][stat]) for m in metrics]] for v in views]
    if recovery:
        used = agg[views[0]]["recall"]["n"] if views else 0
        rows += [["Examples Used", str(used)], ["Examples Skipped", str(summary["examples"] - used)]]
    return rows + [["Avg Sample Time (s)", _fmt(summary["avg_attribution_s"])]]


def _fmt(x: Optional[float]) -> str:
    return "" if x is None else repr(float(x))


def write_mode_csvs(output_dir: Path, summary: dict[str, dict[str, Any]], scorers: Mapping[str, Scorer],
                    views: list[str]) -> list[Path]:
    """``<output_dir>/<mode>/<method>.csv`` in FlashTrace's layout, for every mode a method was scored with."""
    written = []
    for method, s in summary.items():
        for name, scorer in scorers.items():
            if name in s:
                path = Path(output_dir) / name / f"{method}.csv"
                out = io.StringIO()
                csv.writer(out).writerows(mode_csv_rows(scorer, s, views))
                atomic_write_text(path, out.getvalue())
                written.append(path)
    return written


def markdown_summary(summary: dict[str, dict[str, Any]], descriptions: Mapping[str, dict[str, Any]],
                     views: list[str], title: str, comparisons: list[dict[str, Any]] = (),
                     level: float = 0.95) -> str:
    """``summary.md`` (``summary.md.j2``): one table per scorer (``descriptions``: ``Scorer.describe()`` by name;
    ``results_table.summary_tables``, the tables of the job's report.html too): rows = methods, columns = view x
    metric (mean [bootstrap interval], or mean ± std without one), then the examples scored of those the method ran
    on and the seconds per example; then the paired comparisons, if any, one table per scorer (rows = method pair x
    view, columns = metrics: ``results_table.comparison_tables``)."""
    rows = rows_from_summary({"methods": summary, "views": views, "scorers": descriptions})
    return render_page("summary.md.j2", title=title, tables=summary_tables(rows, descriptions, views), level=level,
                       comparisons=comparison_tables(list(comparisons), descriptions, views) if comparisons else [])


def write_job_summary(output_dir: Path, methods: list[str], scorers: dict[str, Scorer], views: list[str], *,
                      title: str, refused: Iterable[str] = (), stats: Optional[StatsSettings] = None) -> dict:
    """A run_exp job's summary from its ``results.jsonl``: ``summary.json``, ``summary.md`` (printed), each mode's
    CSVs and plots; returns the per-method summary."""
    stats = stats or StatsSettings()
    job = JobFiles(Path(output_dir))
    records = [r for _, r in iter_jsonl(job.results) if r["method"] in methods] if job.results.exists() else []
    full = run_summary(records, scorers, views, stats, list(refused))
    atomic_write_text(job.summary, json.dumps(full, indent=2) + "\n")
    summary = full["methods"]
    write_mode_csvs(output_dir, summary, scorers, views)
    md = markdown_summary(summary, full["scorers"], views, title, full["comparisons"], stats.level)
    atomic_write_text(job.summary_md, md)
    mode_plots(scorers, records, views, output_dir)
    print(md, end="")
    return summary
