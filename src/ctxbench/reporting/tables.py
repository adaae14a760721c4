"""Per-run summaries of the per-example result records, and the files FlashTrace's code writes (CSV per mode and
method).

A result record (one line of ``results.jsonl``) holds, for one example and one attribution method, ``example_id``,
``method``, ``P``, ``G``, ``attribution_s`` and the fields each scorer writes (``faithfulness``, ``recovery``, ...:
``{view: values}``). Every table here is built from the scorers' own description of their metrics.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from ctxbench.jsonl import iter_jsonl
from ctxbench.metrics.scorer import Scorer, mean_std
from ctxbench.reporting.render import markdown
from ctxbench.reporting.results_table import comparison_tables, rows_from_summary, summary_tables
from ctxbench.reporting.stats import StatsSettings, bootstrap_ci, compare_methods
from ctxbench.results import JobFiles


def by_method(records: Iterable[dict[str, Any]]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["method"], []).append(r)
    return out


def example_seconds(record: dict[str, Any]) -> float:
    """The real time one method took on one example: its attribution and every scorer's scoring of it."""
    return float(record["attribution_s"]) + sum(map(float, (record.get("scoring_timings") or {}).values()))


def summarize(records: Iterable[dict[str, Any]], scorers: Mapping[str, Scorer], views: Iterable[str],
              stats: Optional[StatsSettings] = None) -> dict[str, dict[str, Any]]:
    """``{method: {"examples", "avg_attribution_s", "avg_total_s", <scorer name>: {view: {metric: {mean, std, n}}}}}``
    (``avg_total_s``: attribution and every scoring step, ``example_seconds``); with ``stats`` every metric also gets
    ``ci_low``/``ci_high``, the bootstrap interval of its mean."""
    views = list(views)
    out: dict[str, dict[str, Any]] = {}
    for method, recs in by_method(records).items():
        s: dict[str, Any] = {"examples": len(recs),
                             "avg_attribution_s": mean_std([r["attribution_s"] for r in recs])[0],
                             "avg_total_s": mean_std([example_seconds(r) for r in recs])[0]}
        for name, scorer in scorers.items():
            agg = scorer.aggregate(recs, views)
            if agg is None:
                continue
            if stats is not None:
                for v, by_metric in scorer.example_values(recs, views).items():
                    for key, vals in by_metric.items():
                        ci = bootstrap_ci(vals.values(), n_resamples=stats.n_resamples, level=stats.level,
                                          seed=stats.seed)
                        agg[v][key].update(ci_low=ci.low, ci_high=ci.high)
            s[name] = agg
        out[method] = s
    return out


def run_summary(records: list[dict[str, Any]], scorers: Mapping[str, Scorer], views: list[str],
                stats: StatsSettings, refused: Iterable[str] = ()) -> dict[str, Any]:
    """What a run's ``summary.json`` holds: the methods' figures (``summarize``), the views, the scorers'
    descriptions, the refused examples, the statistics settings and the paired comparisons."""
    return {"methods": summarize(records, scorers, views, stats), "views": list(views),
            "scorers": {name: sc.describe() for name, sc in scorers.items()}, "refused": list(refused),
            "stats": asdict(stats), "comparisons": compare(records, scorers, views, stats)}


def compare(records: Iterable[dict[str, Any]], scorers: Mapping[str, Scorer], views: Iterable[str],
            stats: StatsSettings) -> list[dict[str, Any]]:
    """Paired comparisons between the methods on the examples both scored, for every scorer, view and metric: rows
    ``{"mode", "view", "metric", "label", "a", "b", **paired_comparison}`` (reporting/stats.py)."""
    views = list(views)
    recs = by_method(records)
    rows = []
    for name, scorer in scorers.items():
        values = {m: scorer.example_values(r, views) for m, r in recs.items()}
        values = {m: v for m, v in values.items() if v is not None}
        if len(values) < 2:
            continue
        for v in views:
            for metric in scorer.metrics():
                per_method = {m: values[m][v][metric.key] for m in values}
                rows += [{"mode": name, "view": v, "metric": metric.key, "label": metric.label, **c}
                         for c in compare_methods(per_method, higher_is_better=metric.higher_is_better,
                                                  settings=stats)]
    return rows


def write_mode_csvs(output_dir: Path, summary: dict[str, dict[str, Any]], scorers: Mapping[str, Scorer],
                    views: list[str]) -> list[Path]:
    """``<output_dir>/<mode>/<method>.csv`` in FlashTrace's layout, for every mode a method was scored with."""
    written = []
    for method, s in summary.items():
        for name, scorer in scorers.items():
            if name in s:
                path = Path(output_dir) / name / f"{method}.csv"
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "w", newline="", encoding="utf-8") as fp:
                    csv.writer(fp).writerows(scorer.csv_rows(s, views))
                written.append(path)
    return written


def markdown_comparisons(comparisons: list[dict[str, Any]], descriptions: Mapping[str, dict[str, Any]],
                         views: list[str], level: float) -> list[str]:
    """One table per scorer: rows = method pair x view, columns = metrics (``results_table.comparison_tables``)."""
    if not comparisons:
        return []
    lines = ["## Paired comparisons", "",
             f"A − B on the examples both methods scored: mean difference with its {level:.0%} bootstrap interval "
             f"(pairs resampled) and the Wilcoxon signed-rank p-value; bold: the interval excludes 0 and "
             f"p < {1 - level:.2g}. (docs/metrics.md#statistics)",
             ""]
    for t in comparison_tables(comparisons, descriptions, views):
        lines += [f"### {t.title}", "", *markdown(t), ""]
    return lines


def markdown_summary(summary: dict[str, dict[str, Any]], descriptions: Mapping[str, dict[str, Any]],
                     views: list[str], title: str, comparisons: list[dict[str, Any]] = (),
                     level: float = 0.95) -> str:
    """One table per scorer (``descriptions``: ``Scorer.describe()`` by name; ``results_table.summary_tables``, the
    tables of the job's report.html too): rows = methods, columns = view x metric (mean [bootstrap interval], or
    mean ± std without one), then the examples scored of those the method ran on and the seconds per example; then
    the paired comparisons, if any."""
    rows = rows_from_summary({"methods": summary, "views": views, "scorers": descriptions})
    lines = [f"# {title}", ""]
    for t in summary_tables(rows, descriptions, views):
        lines += [f"## {t.title}", "", *markdown(t), ""]
    return "\n".join(lines + markdown_comparisons(list(comparisons), descriptions, views, level))


def write_job_summary(output_dir: Path, methods: list[str], scorers: dict[str, Scorer], views: list[str], *,
                      title: str, refused: Iterable[str] = (), stats: Optional[StatsSettings] = None) -> dict:
    """A run_exp job's summary from its ``results.jsonl``: ``summary.json``, ``summary.md`` (printed), each mode's
    CSVs and plots; returns the per-method summary."""
    stats = stats or StatsSettings()
    job = JobFiles(Path(output_dir))
    records = [r for _, r in iter_jsonl(job.results) if r["method"] in methods] if job.results.exists() else []
    full = run_summary(records, scorers, views, stats, list(refused))
    job.summary.write_text(json.dumps(full, indent=2) + "\n")
    summary = full["methods"]
    write_mode_csvs(output_dir, summary, scorers, views)
    md = markdown_summary(summary, full["scorers"], views, title, full["comparisons"], stats.level)
    job.summary_md.write_text(md + "\n", encoding="utf-8")
    for scorer in scorers.values():
        scorer.write_plots(records, views, output_dir)
    print(md)
    return summary
