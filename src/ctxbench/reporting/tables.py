"""Per-run summaries of the per-example result records, and the files the reference writes (CSV per mode and method).

A result record (one line of ``results.jsonl``) holds, for one example and one attribution method, ``example_id``,
``method``, ``P``, ``G``, ``attribution_s`` and the fields each scorer writes (``faithfulness``, ``recovery``, ...:
``{view: values}``). Every table here is built from the scorers' own description of their metrics.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from ctxbench.metrics.scorer import VIEW_LABELS, Scorer, mean_std


def summarize(records: Iterable[dict[str, Any]], scorers: Mapping[str, Scorer],
              views: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{method: {"examples", "avg_attribution_s", <scorer name>: {view: {metric: {mean, std, n}}}}}``."""
    views = list(views)
    by_method: dict[str, list[dict]] = {}
    for r in records:
        by_method.setdefault(r["method"], []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for method, recs in by_method.items():
        s: dict[str, Any] = {"examples": len(recs), "avg_attribution_s": mean_std([r["attribution_s"] for r in recs])[0]}
        for name, scorer in scorers.items():
            agg = scorer.aggregate(recs, views)
            if agg is not None:
                s[name] = agg
        out[method] = s
    return out


def write_mode_csvs(output_dir: Path, summary: dict[str, dict[str, Any]], scorers: Mapping[str, Scorer],
                    views: list[str]) -> list[Path]:
    """``<output_dir>/<mode>/<method>.csv`` in the reference's layout, for every mode a method was scored with."""
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


def _cell(mean: Optional[float], std: Optional[float] = None) -> str:
    if mean is None:
        return "–"
    return f"{mean:.3f}" if std is None else f"{mean:.3f} ± {std:.3f}"


def direction(metrics: list[dict[str, Any]]) -> str:
    """"lower is better", "higher is better", or per column arrows when the metrics disagree."""
    ups = {m["higher_is_better"] for m in metrics}
    if len(ups) == 1:
        return "higher is better" if ups.pop() else "lower is better"
    return "↑ higher, ↓ lower is better"


def metric_header(metric: dict[str, Any], mixed: bool) -> str:
    return metric["label"] + ((" ↑" if metric["higher_is_better"] else " ↓") if mixed else "")


def markdown_summary(summary: dict[str, dict[str, Any]], descriptions: Mapping[str, dict[str, Any]],
                     views: list[str], title: str) -> str:
    """One table per scorer (``descriptions``: ``Scorer.describe()`` by name): rows = methods, columns = view x
    metric (mean ± std), then how many examples were scored and the seconds per attribution."""
    lines = [f"# {title}", ""]
    for name, desc in descriptions.items():
        methods = [m for m in summary if name in summary[m]]
        if not methods:
            continue
        metrics = desc["metrics"]
        mixed = len({m["higher_is_better"] for m in metrics}) > 1
        header = [f"{VIEW_LABELS[v]} {metric_header(m, mixed)}" for v in views for m in metrics]
        lines += [f"## {desc['title']} ({direction(metrics)})", "",
                  "| method | " + " | ".join(header) + " | scored | s/example |", "|---" * (len(header) + 3) + "|"]
        for method in methods:
            s, agg = summary[method], summary[method][name]
            cells = [_cell(agg[v][m["key"]]["mean"], agg[v][m["key"]]["std"]) for v in views for m in metrics]
            scored = agg[views[0]][metrics[0]["key"]]["n"] if views else 0
            lines.append(f"| {method} | " + " | ".join(cells) + f" | {scored}/{s['examples']} | "
                         f"{s['avg_attribution_s']:.2f} |")
        lines.append("")
    return "\n".join(lines)
