"""A run's figures from its per-example result records: per method and metric the mean, spread and bootstrap
interval, and the paired comparisons between the methods (what ``summary.json`` holds; docs/metrics.md#statistics).

A result record (one line of ``results.jsonl``) holds, for one example and one attribution method, ``example_id``,
``method``, ``P``, ``G``, ``attribution_s`` and the fields each scorer writes (``faithfulness``, ``recovery``, ...:
``{view: values}``); every figure here is read through the scorers' own description of their metrics.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Iterable, Mapping, Optional

from ctxbench.metrics.scorer import Scorer, mean_std
from ctxbench.metrics.stats import StatsSettings, bootstrap_ci, compare_methods


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
    ``ci_low``/``ci_high``, the bootstrap interval of its mean, when it rests on at least ``stats.min_n`` examples."""
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
                        if len(vals) < stats.min_n:  # no interval from fewer examples: the mean and its n
                            continue
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
    ``{"mode", "view", "metric", "label", "a", "b", **paired_comparison}`` (metrics/stats.py)."""
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
                if not any(per_method.values()):
                    continue  # a metric no method has a figure of (a deletion set nobody was scored under)
                rows += [{"mode": name, "view": v, "metric": metric.key, "label": metric.label, **c}
                         for c in compare_methods(per_method, higher_is_better=metric.higher_is_better,
                                                  settings=stats)]
    return rows
