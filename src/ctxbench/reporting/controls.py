"""The controls of a Table-1 report (docs/report.md#controls, docs/metrics.md#controls): for each task and metric,
the best attribution method against every control (``CONTROL_METHODS``: methods that read no model) on the examples
both scored.

Each check is the paired test of ``stats.paired_comparison`` (bootstrap interval of the mean difference and Wilcoxon
signed-rank), corrected for multiple comparisons by Holm's step-down method (``stats.holm``; Holm 1979) over the
family of one report: every (task, metric, control) test of one ``control_rows`` call. A test is significant when
the Holm-adjusted p-value is below ``1 - level`` and the bootstrap interval excludes 0 on the side of the mean
difference. A control's cell is marked ``MARK`` (‡, *not worse*) when the corrected test does not find the best
method better, ``MARK_BETTER`` (§, *significantly better*) when it finds the control better; a metric is *not
informative* on a task when some control is marked there. A control on fewer than ``MIN_PAIRED`` paired examples is
not tested (``too_few``), never marked, and not counted in the family; a metric no control was scored with, or
only too few, cannot be checked and says so. Each task gets one verdict sentence naming what each metric can and
cannot tell there.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ctxbench.attribution.controls import CONTROL_METHODS
from ctxbench.reporting.results_table import MIN_STATS, Cell, MinExamples, Table, text_table
from ctxbench.metrics.stats import StatsSettings, holm, paired_comparison
from ctxbench.metrics.summary import by_method

MARK = "‡"  # on a control's cell that is not worse than the task's best method (the corrected test)
MARK_BETTER = "§"  # on a control's cell that is significantly better than the task's best method (after Holm)
MIN_PAIRED = MIN_STATS  # the fewest paired examples a control is tested on; fewer: no test, no mark


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
                 least: MinExamples, stats: StatsSettings, min_paired: Optional[int] = None) -> list[dict[str, Any]]:
    """Per task and metric: the best method (by mean, among the figures the report ranks) and each control's paired
    comparison against it (``controls``), Holm-corrected over every test of this call (the family).

    A control's entry: ``control``, ``mean``, ``n`` (paired examples), ``diff`` (control − best) with ``ci_low`` /
    ``ci_high``, ``p_value`` (raw Wilcoxon) and ``p_holm`` (adjusted; None when not tested), ``above`` (how many
    methods its mean is better than), ``too_few`` (fewer than ``min_paired`` pairs: not tested, never marked),
    ``significantly_better`` (the control beats the best method), ``at_least_as_good`` (the best method does not beat
    it: true for both marks). A control with no example in common with the best method has no entry. ``min_paired``:
    by default ``stats.min_n`` (the report's ``stats`` config), else ``MIN_PAIRED``.

    The row: ``control`` (the strongest tested control: significantly better first, then not worse, then the
    closest by mean; None when none was tested), ``informative`` (True when the best method beats every tested
    control, False when some control is at least as good, None when no control was tested: none scored on the same
    examples, or each on fewer than ``min_paired``), ``beaten`` (the methods the strongest control's mean is better
    than), ``holm_family`` (the tests of the family) and ``min_paired``. ``values[task]``: ``example_values``."""
    if min_paired is None:
        min_paired = int(stats.min_n)
    rows, tests, ranked = [], [], []
    for d in datasets:
        for m in metrics:
            row, best = _metric_row(d, m, methods, cells, values.get(d, {}).get(m["label"], {}), least, stats,
                                    min_paired, tests)
            rows.append(row)
            ranked.append(best)
    for (entry, comp), p in zip(tests, holm([comp["p_value"] for _, comp in tests])):
        entry["p_holm"] = p
        significant = _significant(comp, p, stats.level)
        entry["significantly_better"] = significant and comp["better"] == "a"
        # not worse: the corrected test does not find the best method better than the control
        entry["at_least_as_good"] = not (significant and comp["better"] == "b")
    for row, best in zip(rows, ranked):
        row["holm_family"] = len(tests)
        _judge(row, best)
    return rows


def _metric_row(d: str, m: Mapping[str, Any], methods: Sequence[str], cells: Mapping[tuple[str, str], dict],
                per: Mapping[str, dict], least: MinExamples, stats: StatsSettings, min_paired: int,
                tests: list) -> tuple[dict[str, Any], list]:
    """One task and metric's row with its controls' entries (untested yet: their pairs are added to ``tests``, the
    family Holm corrects), and the ranked methods ``(method, mean)``."""
    label, up = m["label"], m["higher_is_better"]
    means = {me: st["mean"] for me in methods if (st := least.ranked(cells.get((d, me)), label)) is not None}
    best = [(me, x) for me, x in means.items() if not is_control(me)]
    row = {"dataset": d, "metric": label, "higher_is_better": up, "best": None, "best_mean": None,
           "controls": [], "control": None, "informative": None, "beaten": [], "methods": len(best),
           "min_paired": min_paired}
    if not best:
        return row, best
    row["best"], row["best_mean"] = (max if up else min)(best, key=lambda t: t[1])
    for c in (me for me in means if is_control(me)):
        comp = paired_comparison(per.get(c, {}), per.get(row["best"], {}), higher_is_better=up,
                                 n_resamples=stats.n_resamples, level=stats.level, seed=stats.seed)
        if comp["n"] == 0:
            continue  # no example both scored (or no results.jsonl): nothing to test
        entry = {"control": c, "mean": means[c], "n": comp["n"], "diff": comp["diff"],
                 "ci_low": comp["ci_low"], "ci_high": comp["ci_high"], "p_value": None, "p_holm": None,
                 "above": sum((x < means[c]) if up else (x > means[c]) for _, x in best),
                 "too_few": comp["n"] < min_paired, "significantly_better": False, "at_least_as_good": False}
        if not entry["too_few"]:
            entry["p_value"] = comp["p_value"]
            tests.append((entry, comp))
        row["controls"].append(entry)
    return row, best


def _judge(row: dict[str, Any], best: list) -> None:
    """The row's strongest tested control, whether the metric is informative, and the methods it beats."""
    up = row["higher_is_better"]
    tested = [c for c in row["controls"] if not c["too_few"]]
    if tested:
        strongest = max(tested, key=lambda c: (c["significantly_better"], c["at_least_as_good"],
                                               c["mean"] if up else -c["mean"]))
        row["control"] = strongest["control"]
        row["informative"] = not any(c["at_least_as_good"] for c in tested)
        # the methods whose mean the strongest control beats: what a reader of the table should not quote
        row["beaten"] = [me for me, x in best if (x < strongest["mean"] if up else x > strongest["mean"])]


def _significant(comp: Mapping[str, Any], p_holm: Optional[float], level: float) -> bool:
    """The two-criterion rule with the adjusted p-value: Holm p below ``1 - level`` and the bootstrap interval of
    the difference excluding 0 on the side of the mean difference."""
    if comp["better"] is None or p_holm is None or p_holm >= 1 - level or comp["ci_low"] is None:
        return False
    return comp["ci_low"] > 0 if comp["diff"] > 0 else comp["ci_high"] < 0


def marks(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], str]:
    """``{(task, control, metric label): mark}``: ``MARK_BETTER`` on a control significantly better than the task's
    best method, ``MARK`` on one not worse; none on a control the best method beats or one not tested (too few
    pairs). Rows read back from an older table1.json (no ``significantly_better``) get ``MARK`` where
    ``at_least_as_good``."""
    out = {}
    for r in rows:
        for c in r["controls"]:
            if c.get("too_few"):
                continue
            if c.get("significantly_better"):
                out[(r["dataset"], c["control"], r["metric"])] = MARK_BETTER
            elif c.get("at_least_as_good"):
                out[(r["dataset"], c["control"], r["metric"])] = MARK
    return out


def legend(min_paired: int = MIN_PAIRED) -> str:
    """What the two marks mean, for a page's caption."""
    return (f"{MARK}: a control not worse than the task's best method, {MARK_BETTER}: a control significantly "
            f"better (paired test, Holm-corrected over the table's control tests; none on fewer than "
            f"{min_paired} pairs)")


def _fig(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.3f}"


def _pairs(entries: Sequence[Mapping[str, Any]]) -> str:
    """"3 paired examples", "1 paired example", "2–5 paired examples" (the too-few controls' pairs)."""
    ns = sorted({c["n"] for c in entries})
    if len(ns) > 1:
        return f"{ns[0]}–{ns[-1]} paired examples"
    return f"{ns[0]} paired example{'s' * (ns[0] != 1)}"


def family_size(rows: Sequence[Mapping[str, Any]]) -> int:
    """The tests of the family the rows were corrected over (``holm_family``; else the tested controls counted)."""
    sizes = {r["holm_family"] for r in rows if r.get("holm_family") is not None}
    if sizes:
        return max(sizes)
    return sum(1 for r in rows for c in r["controls"] if not c.get("too_few"))


def verdict(task: str, rows: Sequence[Mapping[str, Any]], tests: Optional[int] = None) -> str:
    """One sentence on what each metric can and cannot tell on ``task``: informative, not informative (naming the
    strongest control, "significantly better" or "not worse"), cannot be checked (too few pairs, or no control on
    the same examples); then the correction, once: Holm over the ``tests`` of the table (by default
    ``family_size(rows)``)."""
    mine = [r for r in rows if r["dataset"] == task]
    tells = [r["metric"] for r in mine if r["informative"] is True]
    fooled = [r for r in mine if r["informative"] is False]
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
            how = "significantly better" if c.get("significantly_better") else "not worse"
            said.append(f"{r['metric']} ({r['control']} {_fig(c['mean'])} against {r['best']} {_fig(r['best_mean'])}: "
                        f"{how})")
        parts.append(f"{'; '.join(said)} {'is' if len(fooled) == 1 else 'are'} not informative on this variant")
    if parts:  # the correction, once: on the not-informative clause, else on "(it beats every control)"
        n = family_size(rows) if tests is None else tests
        note = f"Holm over the {n} test{'s' * (n != 1)} of this table"
        if fooled:
            parts[-1] += f" ({note})"
        else:
            parts[0] = parts[0][:-1] + f"; {note})"
    for r in mine:
        few = [c for c in r["controls"] if c.get("too_few")]
        if not few or not r["best"]:
            continue
        least = r.get("min_paired", MIN_PAIRED)
        if r["informative"] is None:
            parts.append(f"{r['metric']} cannot be checked: only {_pairs(few)} (fewer than {least})")
        else:
            parts.append(f"{r['metric']} cannot be checked against {', '.join(c['control'] for c in few)}: only "
                         f"{_pairs(few)} (fewer than {least})")
    unchecked = [r["metric"] for r in mine if r["informative"] is None and r["best"] and not r["controls"]]
    if unchecked:
        parts.append(f"{', '.join(unchecked)} cannot be checked (no control was scored with "
                     f"{'it' if len(unchecked) == 1 else 'them'} on the same examples)")
    return ("; ".join(parts) if parts else "no figure to judge") + "."


def controls_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """The check per task, metric and control (``control_rows``), the strongest control first: the best method, the
    control, their paired difference (control − best, with its interval), the pairs, the raw and the Holm p-value,
    how many methods the control's mean is better than, the two verdicts (not worse ‡, significantly better §) and
    whether the metric is informative. A metric with no control tested gets one line saying why."""
    body = []
    for r in rows:
        if not r["best"]:
            continue
        least = r.get("min_paired", MIN_PAIRED)
        if r["informative"] is None and not r["controls"]:
            said = Cell("not checked (no control on the same examples)")
        elif r["informative"] is None:
            said = Cell(f"not checked (fewer than {least} pairs)")
        else:
            said = Cell("yes") if r["informative"] else Cell("no", strong=True)
        head = [r["dataset"], r["metric"], f"{r['best']} {_fig(r['best_mean'])}"]
        if not r["controls"]:
            body.append([*head, "–", "–", "–", "–", "–", "–", "–", "–", said])
            continue
        for c in sorted(r["controls"], key=lambda c: c["control"] != r["control"]):
            diff = "–" if c["diff"] is None else f"{c['diff']:+.3f}"
            if c["ci_low"] is not None and not c.get("too_few"):  # no interval on too few pairs
                diff += f" [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"
            if c.get("too_few"):
                tail = [f"{c['n']} (fewer than {least}: not tested)", "–", "–", str(c["above"]), "–", "–"]
            else:
                tail = [str(c["n"]), f"{c['p_value']:.2g}", f"{c['p_holm']:.2g}", str(c["above"]),
                        ("yes" if c["significantly_better"] else f"yes {MARK}") if c["at_least_as_good"] else "no",
                        Cell(f"yes {MARK_BETTER}", strong=True) if c["significantly_better"] else "no"]
            body.append([*head, f"{c['control']} {_fig(c['mean'])}", diff, *tail, said])
    return text_table(("task", "metric", "best method", "control", "control − best [interval]", "n", "p",
                       "p (Holm)", "methods below the control", "not worse", "significantly better", "informative"),
                      body)


def any_control(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether some control was scored beside the methods (else no figure can be told from a control's)."""
    return any(r["controls"] for r in rows)
