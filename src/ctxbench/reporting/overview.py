"""The Table-1 overview (``report overview=[report dirs]``, ``scripts/table1.sh overview``): for every report, per task
and headline metric, the order of the methods and the controls (best first, each with its mean and the control's
mark) and what the control check says, read from the report's ``table1.json`` alone.

It is the results page the docs link to instead of restating figures by hand: every number and verdict on it is
rendered from the data it describes, so it cannot drift from the reports (a rerun of the lane rewrites it).
"""

from __future__ import annotations

from typing import Any, Sequence

from ctxbench.reporting.controls import MARK, MARK_BETTER, is_control, marks
from ctxbench.reporting.render import render_page
from ctxbench.reporting.results_table import MIN_STATS, text_table

# The headline metrics, in the order the overview lists them: one protocol per column (the common deletion sets), then
# the set-free metrics; a report that did not score one leaves it out.
OVERVIEW_METRICS = ("RISE@all", "MAS@all", "RISE@nonstop", "MAS@nonstop", "Recall@10%", "LDS", "Drop@1 (nats/token)",
                    "Drop@3 (nats/token)", "Drop@5 (nats/token)")


def _name(t: dict, folder: str) -> str:
    models = ", ".join(t.get("models") or []) or "?"
    return f"{t.get('caption') or folder} ({models})"


def metric_order(t: dict, task: str, label: str) -> list[dict[str, Any]]:
    """The methods and controls with a figure of ``label`` on ``task`` resting on at least the report's
    ``stats.min_n`` examples, best first (ties keep the report's order): ``{method, mean, n, control, mark}``."""
    meta = next((m for m in t["metrics"] if m["label"] == label), None)
    if meta is None:
        return []
    least = int((t.get("stats") or {}).get("min_n", MIN_STATS))
    marked = marks(t.get("controls") or [])
    got = []
    for c in t["cells"]:
        fig = (c.get("figures") or {}).get(label) or {}
        if c["dataset"] != task or fig.get("mean") is None or (fig.get("n") or 0) < least:
            continue
        got.append({"method": c["method"], "mean": float(fig["mean"]), "n": int(fig["n"]),
                    "control": is_control(c["method"]), "mark": marked.get((task, c["method"], label), "")})
    return sorted(got, key=lambda r: -r["mean"] if meta["higher_is_better"] else r["mean"])


def check_text(t: dict, task: str, label: str) -> str:
    """The control check of one task and metric in words, from the report's ``controls`` rows."""
    row = next((r for r in t.get("controls") or [] if r["dataset"] == task and r["metric"] == label), None)
    if row is None or not row.get("best"):
        return "no method"
    better = [c["control"] for c in row["controls"] if c.get("significantly_better")]
    same = [c["control"] for c in row["controls"] if c.get("at_least_as_good") and not c.get("significantly_better")]
    if better:
        return f"**{', '.join(better)} significantly better** than the best method ({row['best']})"
    if same:
        return f"not informative: {', '.join(same)} not worse than {row['best']}"
    if row.get("informative"):
        return f"{row['best']} beats every control"
    return "not checked (no control tested on enough paired examples)"


def _order_text(order: Sequence[dict]) -> str:
    return ", ".join(f"{r['method']}{' (control)' if r['control'] else ''} {r['mean']:.3f}{r['mark']}" for r in order)


def task_rows(t: dict) -> list[list[str]]:
    """One row per task and headline metric that ranks two or more rows: the task, its n, the metric, the order, the
    check."""
    rows = []
    for task in t["datasets"]:
        for label in (m for m in OVERVIEW_METRICS if any(x["label"] == m for x in t["metrics"])):
            order = metric_order(t, task, label)
            if len(order) < 2:  # nothing compared (gold's nonstop set: FlashTrace alone)
                continue
            ns = sorted({r["n"] for r in order})
            rows.append([task, "/".join(map(str, ns)), label, _order_text(order), check_text(t, task, label)])
    return rows


def control_wins(t: dict) -> list[tuple[str, str, str, str]]:
    """``(task, metric, control, best method)`` wherever a control is significantly better than the best method."""
    return [(r["dataset"], r["metric"], c["control"], r["best"]) for r in t.get("controls") or []
            for c in r["controls"] if c.get("significantly_better")]


def overview_markdown(reports: list[tuple[str, dict]]) -> str:
    """``overview.md`` over ``(folder, table1.json)`` reports (``overview.md.j2``)."""
    sections = []
    for folder, t in reports:
        wins = control_wins(t)
        sections.append({"name": _name(t, folder), "folder": folder,
                         "min_n": int((t.get("stats") or {}).get("min_n", MIN_STATS)),
                         "table": text_table(("task", "n", "metric", "best first (mean; mark)", "control check"),
                                             task_rows(t)),
                         "wins": text_table(("task", "metric", "control", "best method"), wins) if wins else None})
    return render_page("overview.md.j2", sections=sections, mark=MARK, better=MARK_BETTER)
