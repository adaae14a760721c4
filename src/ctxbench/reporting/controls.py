"""The controls of a Table-1 report (docs/report.md#controls, docs/metrics.md#controls): for each task and metric,
the best attribution method against every control (``copy_match``, ``position``, ``random``: methods that read no
model) on the examples both scored.

A cell is *not informative* on a task when some control is at least as good as the best method there: the paired
test (``stats.paired_comparison``: bootstrap interval and Wilcoxon signed-rank) does not find the best method
better than that control. A metric no control was scored with cannot be checked, and says so. Each task gets one
verdict sentence naming what each metric can and cannot tell there.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ctxbench.attribution.controls import CONTROL_METHODS
from ctxbench.reporting.results_table import Cell, MinExamples, Table, text_table
from ctxbench.metrics.stats import StatsSettings, paired_comparison
from ctxbench.metrics.summary import by_method

MARK = "‡"  # on a control's cell that is at least as good as the task's best method


def is_control(method: str) -> bool:
    """A control's row (``method`` or ``method (setting)``)."""
    return method.split(" (", 1)[0] in CONTROL_METHODS


def example_values(records: list[dict], scorers: Mapping[str, Any], view: str) -> dict[str, dict[str, dict]]:
    """``{metric label: {method: {example id: value}}}`` from one task's records."""
    out: dict[str, dict[str, dict]] = {}
    for method, recs in by_method(records).items():
        for scorer in scorers.values():
            got = scorer.example_values(recs, [view])
            if got is None:
                continue
            for m in scorer.metrics():
                if got[view][m.key]:
                    out.setdefault(m.label, {})[method] = got[view][m.key]
    return out


def control_rows(datasets: Sequence[str], methods: Sequence[str], metrics: Sequence[Mapping[str, Any]],
                 cells: Mapping[tuple[str, str], dict], values: Mapping[str, Mapping[str, dict]],
                 least: MinExamples, stats: StatsSettings) -> list[dict[str, Any]]:
    """Per task and metric: the best method (by mean, among the figures the report ranks), each control's paired
    comparison against it (``control``: the strongest control, the one the test separates least from the best), and
    ``informative``: True when the best method beats every control scored, False when some control is at least as
    good, None when no control has a figure on the examples the best method scored (or no method has one);
    ``beaten``: the methods the strongest control's mean is better than. ``values[task]``: ``example_values``."""
    rows = []
    for d in datasets:
        for m in metrics:
            label, up = m["label"], m["higher_is_better"]

            means = {me: st["mean"] for me in methods if (st := least.ranked(cells.get((d, me)), label)) is not None}
            best = [(me, x) for me, x in means.items() if not is_control(me)]
            controls = [me for me in means if is_control(me)]
            row = {"dataset": d, "metric": label, "higher_is_better": up, "best": None, "best_mean": None,
                   "controls": [], "control": None, "informative": None, "beaten": [], "methods": len(best)}
            if best:
                row["best"], row["best_mean"] = (max if up else min)(best, key=lambda t: t[1])
            per = values.get(d, {}).get(label, {})
            for c in controls if row["best"] else []:
                comp = paired_comparison(per.get(c, {}), per.get(row["best"], {}), higher_is_better=up,
                                         n_resamples=stats.n_resamples, level=stats.level, seed=stats.seed)
                if comp["n"] == 0:
                    continue  # no example both scored (or no results.jsonl): nothing to test
                # at least as good: the test does not find the best method better than the control
                beaten = comp["significant"] and comp["better"] == "b"
                row["controls"].append({"control": c, "mean": means[c], "n": comp["n"], "diff": comp["diff"],
                                        "p_value": comp["p_value"], "at_least_as_good": not beaten})
            if row["controls"]:
                # the strongest control: one at least as good if any, else the closest by mean
                strongest = max(row["controls"], key=lambda c: (c["at_least_as_good"], c["mean"] if up else -c["mean"]))
                row["control"] = strongest["control"]
                row["informative"] = not any(c["at_least_as_good"] for c in row["controls"])
                # the methods whose mean the strongest control beats: what a reader of the table should not quote
                row["beaten"] = [me for me, x in best if (x < strongest["mean"] if up else x > strongest["mean"])]
            rows.append(row)
    return rows


def marks(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], str]:
    """``{(task, control, metric label): MARK}`` for the control cells at least as good as the task's best method."""
    return {(r["dataset"], c["control"], r["metric"]): MARK for r in rows for c in r["controls"]
            if c["at_least_as_good"]}


def _fig(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.3f}"


def verdict(task: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """One sentence on what each metric can and cannot tell on ``task``."""
    mine = [r for r in rows if r["dataset"] == task]
    tells = [r["metric"] for r in mine if r["informative"] is True]
    fooled = [r for r in mine if r["informative"] is False]
    unchecked = [r["metric"] for r in mine if r["informative"] is None and r["best"]]
    parts = []
    if tells:
        parts.append(f"{', '.join(tells)} tell{'s' * (len(tells) == 1)} the best method from the controls (it beats "
                     f"every control)")
    below = [f"{r['metric']}: {r['control']} is above {len(r['beaten'])} of {r['methods']} methods"
             for r in mine if r["informative"] is True and r["beaten"]]
    if below:
        parts.append(f"yet {'; '.join(below)}")
    if fooled:
        said = []
        for r in fooled:
            c = next(c for c in r["controls"] if c["control"] == r["control"])
            said.append(f"{r['metric']} ({r['control']} {_fig(c['mean'])} against {r['best']} {_fig(r['best_mean'])})")
        parts.append(f"{'; '.join(said)} {'is' if len(fooled) == 1 else 'are'} not informative on this variant: a "
                     f"control is at least as good as the best method")
    if unchecked:
        parts.append(f"{', '.join(unchecked)} cannot be checked (no control was scored with "
                     f"{'it' if len(unchecked) == 1 else 'them'} on the same examples)")
    return ("; ".join(parts) if parts else "no figure to judge") + "."


def controls_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """The check per task and metric (``control_rows``): the best method, the strongest control, their paired
    difference, how many methods the control is above, and whether the metric is informative."""
    body = []
    for r in rows:
        if not r["best"]:
            continue
        c = next((c for c in r["controls"] if c["control"] == r["control"]), None)
        versus = "–" if c is None or c["diff"] is None else f"{c['diff']:+.3f} [n={c['n']}, p={c['p_value']:.2g}]"
        said = {True: Cell("yes"), False: Cell("no", strong=True),
                None: Cell("not checked (no control on the same examples)")}[r["informative"]]
        body.append([r["dataset"], r["metric"], f"{r['best']} {_fig(r['best_mean'])}",
                     "–" if c is None else f"{c['control']} {_fig(c['mean'])}", versus,
                     "–" if c is None else f"{len(r['beaten'])} of {r['methods']}", said])
    return text_table(("task", "metric", "best method", "strongest control", "control − best [n, p]",
                       "methods below the control", "informative"), body)


def any_control(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether some control was scored beside the methods (else no figure can be told from a control's)."""
    return any(r["controls"] for r in rows)
