"""Per-run summaries of the per-example result records, and the files the reference writes (CSV per mode and method).

A result record (one line of ``results.jsonl``) holds, for one example and one attribution method::

    {"example_id", "method", "P", "G", "attribution_s",
     "faithfulness": {view: {"RISE", "MAS", "RISE+AP", "curve", "density"}},      # when mode faithfulness ran
     "recovery": {view: recall or null}, "recovery_skipped": reason or null,     # when mode recovery ran
     "coverage": {view: {"within", "above_half", "above_mean"} or null}}            # when mode coverage ran
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

VIEW_LABELS = {"seq": "Seq", "row": "Row", "rec": "Recursive"}
FAITH_METRICS = ("RISE", "MAS", "RISE+AP")
COVERAGE_METRICS = ("within", "above_half", "above_mean")


def _mean_std(values: list[float]) -> tuple[Optional[float], Optional[float]]:
    if not values:
        return None, None
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std())


def summarize(records: Iterable[dict[str, Any]], views: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{method: {"examples", "avg_attribution_s", "faithfulness": {view: {metric: {mean, std}}},
    "recovery": {view: {mean, std}}, "recovery_used", "recovery_skipped", "coverage": {...}}}``."""
    views = list(views)
    by_method: dict[str, list[dict]] = {}
    for r in records:
        by_method.setdefault(r["method"], []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for method, recs in by_method.items():
        s: dict[str, Any] = {"examples": len(recs),
                             "avg_attribution_s": _mean_std([r["attribution_s"] for r in recs])[0]}
        faith = [r["faithfulness"] for r in recs if r.get("faithfulness")]
        if faith:
            s["faithfulness"] = {
                v: {m: dict(zip(("mean", "std"), _mean_std([f[v][m] for f in faith if v in f]))) for m in FAITH_METRICS}
                for v in views}
        rec_recs = [r for r in recs if "recovery" in r]
        if rec_recs:
            used = [r["recovery"] for r in rec_recs if r.get("recovery") is not None]
            s["recovery"] = {v: dict(zip(("mean", "std"), _mean_std([u[v] for u in used]))) for v in views}
            s["recovery_used"] = len(used)
            s["recovery_skipped"] = len(rec_recs) - len(used)
        cov = [r["coverage"] for r in recs if r.get("coverage")]
        if cov:
            s["coverage"] = {v: {m: dict(zip(("mean", "std"), _mean_std([c[v][m] for c in cov if c.get(v)])))
                                 for m in COVERAGE_METRICS} for v in views}
        out[method] = s
    return out


def _fmt(x: Optional[float]) -> str:
    return "" if x is None else repr(float(x))


def _stat_rows(views, label: str, std_label: str, cells) -> list[list[str]]:
    """Rows ``<View> Attr <label> Mean`` then ``... <std_label>``; ``cells(view, stat)`` gives the row's values."""
    return [[f"{VIEW_LABELS[v]} Attr {label} {name}", *cells(v, stat)]
            for stat, name in (("mean", "Mean"), ("std", std_label)) for v in views]


def write_faithfulness_csv(path: Path, s: dict[str, Any], views: Iterable[str]) -> None:
    """The reference's layout: rows ``<View> Attr Scores Mean`` / ``... Var`` (it stores the standard deviation under
    "Var"; we keep its labels so existing readers work) x columns RISE, MAS, RISE+AP, then the average time."""
    f = s["faithfulness"]
    rows = [["Method", *FAITH_METRICS],
            *_stat_rows(views, "Scores", "Var", lambda v, st: [_fmt(f[v][m][st]) for m in FAITH_METRICS]),
            ["Avg Sample Time (s)", _fmt(s["avg_attribution_s"])]]
    _write_rows(path, rows)


def write_recovery_csv(path: Path, s: dict[str, Any], views: Iterable[str]) -> None:
    r = s["recovery"]
    rows = [["Method", "Recovery@10%"], *_stat_rows(views, "Recovery", "Std", lambda v, st: [_fmt(r[v][st])]),
            ["Examples Used", str(s["recovery_used"])], ["Examples Skipped", str(s["recovery_skipped"])],
            ["Avg Sample Time (s)", _fmt(s["avg_attribution_s"])]]
    _write_rows(path, rows)


def write_coverage_csv(path: Path, s: dict[str, Any], views: Iterable[str]) -> None:
    c = s["coverage"]
    rows = [["Method", *COVERAGE_METRICS],
            *_stat_rows(views, "Coverage", "Std", lambda v, st: [_fmt(c[v][m][st]) for m in COVERAGE_METRICS]),
            ["Avg Sample Time (s)", _fmt(s["avg_attribution_s"])]]
    _write_rows(path, rows)


def _write_rows(path: Path, rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fp:
        csv.writer(fp).writerows(rows)


def write_mode_csvs(output_dir: Path, summary: dict[str, dict[str, Any]], views: list[str]) -> list[Path]:
    """``<output_dir>/<mode>/<method>.csv`` for every mode a method was scored with."""
    written = []
    for method, s in summary.items():
        for mode, writer in (("faithfulness", write_faithfulness_csv), ("recovery", write_recovery_csv),
                             ("coverage", write_coverage_csv)):
            if mode in s:
                path = Path(output_dir) / mode / f"{method}.csv"
                writer(path, s, views)
                written.append(path)
    return written


def _cell(mean: Optional[float], std: Optional[float] = None) -> str:
    if mean is None:
        return "–"
    return f"{mean:.3f}" if std is None else f"{mean:.3f} ± {std:.3f}"


def markdown_summary(summary: dict[str, dict[str, Any]], views: list[str], title: str) -> str:
    """One table per mode: rows = methods, columns = view x metric (mean ± std)."""
    lines = [f"# {title}", ""]
    methods = list(summary)
    if any("faithfulness" in summary[m] for m in methods):
        lines += ["## Faithfulness (lower is better)", "",
                  "| method | " + " | ".join(f"{VIEW_LABELS[v]} {m}" for v in views for m in FAITH_METRICS)
                  + " | s/example |",
                  "|---" * (1 + len(views) * len(FAITH_METRICS) + 1) + "|"]
        for m in methods:
            f = summary[m].get("faithfulness")
            if f:
                cells = [_cell(f[v][k]["mean"], f[v][k]["std"]) for v in views for k in FAITH_METRICS]
                lines.append(f"| {m} | " + " | ".join(cells) + f" | {summary[m]['avg_attribution_s']:.2f} |")
        lines.append("")
    if any("recovery" in summary[m] for m in methods):
        lines += ["## Recovery@10% (higher is better)", "",
                  "| method | " + " | ".join(VIEW_LABELS[v] for v in views) + " | used | skipped |",
                  "|---" * (1 + len(views) + 2) + "|"]
        for m in methods:
            r = summary[m].get("recovery")
            if r:
                cells = [_cell(r[v]["mean"], r[v]["std"]) for v in views]
                lines.append(f"| {m} | " + " | ".join(cells)
                             + f" | {summary[m]['recovery_used']} | {summary[m]['recovery_skipped']} |")
        lines.append("")
    if any("coverage" in summary[m] for m in methods):
        lines += ["## Coverage of gold sentences (legacy)", "",
                  "| method | " + " | ".join(f"{VIEW_LABELS[v]} {k}" for v in views for k in COVERAGE_METRICS) + " |",
                  "|---" * (1 + len(views) * len(COVERAGE_METRICS)) + "|"]
        for m in methods:
            c = summary[m].get("coverage")
            if c:
                lines.append(f"| {m} | " + " | ".join(_cell(c[v][k]["mean"]) for v in views for k in COVERAGE_METRICS)
                             + " |")
        lines.append("")
    return "\n".join(lines)
