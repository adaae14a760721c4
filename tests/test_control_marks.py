"""The controls check's statistics (reporting/controls.py, metrics/stats.py): Holm's step-down adjustment on a
hand-computed family and against the procedure it stands for, the two marks (‡ not worse, § significantly better),
the ten-pair rule, and a control that one test alone finds worse but the Holm-corrected family does not."""

import math

import numpy as np
import pytest

from ctxbench.metrics.stats import StatsSettings, holm
from ctxbench.reporting.controls import (MARK, MARK_BETTER, MIN_PAIRED, control_rows, controls_table, marks,
                                         verdict)
from ctxbench.reporting.render import markdown
from ctxbench.reporting.results_table import MinExamples

from helpers.records import report_cells

IDS = [f"e{i}" for i in range(12)]
R = {"label": "Recall", "key": "recall", "higher_is_better": True}
LDS = {"label": "LDS", "key": "lds", "higher_is_better": True}


def _per(values, ids=IDS):
    return dict(zip(ids, (float(v) for v in values)))


# --- Holm ----------------------------------------------------------------------------------------------------------

def test_holm_on_a_hand_computed_family():
    # sorted 0.005, 0.01, 0.03, 0.04: 4 x 0.005 = 0.02, 3 x 0.01 = 0.03, 2 x 0.03 = 0.06, max(0.06, 1 x 0.04) = 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # None is no test: passed through, not counted in m (m = 2 here)
    got = holm([None, 0.01, None, 0.04])
    assert got[0] is None and got[2] is None and got[1] == pytest.approx(0.02) and got[3] == pytest.approx(0.04)
    assert holm([0.02, 0.02]) == pytest.approx([0.04, 0.04])  # ties
    assert holm([0.3, 0.5, 0.9]) == pytest.approx([0.9, 1.0, 1.0])  # capped at 1, never decreasing in p
    assert holm([0.04]) == [0.04] and holm([]) == [] and holm([None]) == [None]
    for bad in (1.5, -0.1, math.nan):
        with pytest.raises(ValueError, match="not in"):
            holm([0.01, bad])


def test_holm_rejects_what_the_step_down_procedure_rejects():
    """An adjusted p below alpha is a rejection of Holm's procedure at alpha: compare p_(j) with alpha / (m - j + 1)
    in ascending order and stop at the first that is not below (statsmodels is not a dependency of this project)."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        m = int(rng.integers(1, 12))
        p = np.round(rng.random(m) ** 3, 3)  # many small ones, some ties
        adjusted = holm(p.tolist())
        for alpha in (0.01, 0.05, 0.1, 0.25):
            rejected = set()
            for j, i in enumerate(np.argsort(p, kind="stable"), start=1):
                if p[i] >= alpha / (m - j + 1):
                    break
                rejected.add(int(i))
            assert {i for i, a in enumerate(adjusted) if a < alpha} == rejected, (p, alpha)


# --- the marks -----------------------------------------------------------------------------------------------------

def _four_controls():
    """One task: flash is the best method on Recall; copy_match is above it on every example (significantly better),
    position is level with it (signs alternate), random far below, random (seed=1) shares only 3 examples with it.
    On LDS the only control shares 3 examples with the best method."""
    flash = 0.6 + 0.02 * np.arange(12)
    late = [f"e{i}" for i in range(9, 21)]  # scored on 12 examples, 3 of them flash's (e9, e10, e11)
    return {"t": {
        "Recall": {"flash": _per(flash), "attention": _per(flash - 0.3),
                   "copy_match": _per(flash + 0.05 + 0.001 * np.arange(12)),
                   "position": _per(flash + 0.01 * np.array([1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12])),
                   "random": _per(0.1 + 0.001 * np.arange(12)),
                   "random (seed=1)": _per(0.9 + 0.001 * np.arange(12), late)},
        "LDS": {"flash": _per(0.5 + 0.01 * np.arange(12)), "copy_match": _per(0.9 + 0.001 * np.arange(12), late)}}}


def test_significantly_better_not_worse_worse_and_too_few_get_their_own_marks():
    values = _four_controls()
    methods = ["flash", "attention", "copy_match", "position", "random", "random (seed=1)"]
    rows = control_rows(["t"], methods, [R, LDS], report_cells(values), values, MinExamples(10), StatsSettings())
    rec, lds = rows
    by = {c["control"]: c for c in rec["controls"]}
    assert rec["best"] == "flash" and rec["holm_family"] == 3 and rec["min_paired"] == MIN_PAIRED == 10
    # copy_match: the control beats the best method after Holm (mark 2); at least as good too
    assert by["copy_match"]["significantly_better"] and by["copy_match"]["at_least_as_good"]
    assert by["copy_match"]["p_holm"] < 0.05 and by["copy_match"]["ci_low"] > 0
    # position: no significant difference either way (mark 1)
    assert by["position"]["at_least_as_good"] and not by["position"]["significantly_better"]
    assert by["position"]["p_value"] > 0.5 and by["position"]["p_holm"] >= by["position"]["p_value"]
    # random: clearly worse, no mark
    assert not by["random"]["at_least_as_good"] and not by["random"]["significantly_better"]
    # random (seed=1): 3 pairs, no test, no mark, not in the family
    few = by["random (seed=1)"]
    assert few["too_few"] and few["n"] == 3 and few["p_value"] is None and few["p_holm"] is None
    assert not few["at_least_as_good"] and not few["significantly_better"]
    assert rec["control"] == "copy_match" and rec["informative"] is False
    assert lds["informative"] is None and lds["control"] is None and lds["controls"][0]["too_few"]
    assert marks(rows) == {("t", "copy_match", "Recall"): MARK_BETTER, ("t", "position", "Recall"): MARK}
    assert MARK != MARK_BETTER and MARK_BETTER not in MARK
    said = verdict("t", rows)
    assert said == ("Recall (copy_match 0.765 against flash 0.710: significantly better) is not informative on this "
                    "variant (Holm over the 3 tests of this table); Recall cannot be checked against random (seed=1): "
                    "only 3 paired examples (fewer than 10); LDS cannot be checked: only 3 paired examples (fewer "
                    "than 10).")
    assert said.count("Holm") == 1 and verdict("t", rows, tests=45).count("Holm over the 45 tests") == 1
    md = "\n".join(markdown(controls_table(rows)))
    assert ("| task | metric | best method | control | control − best [interval] | n | p | p (Holm) | methods below "
            "the control | not worse | significantly better | informative |") in md
    lines = md.splitlines()
    assert "| copy_match 0.765 |" in lines[2] and "| yes | **yes §** | **no** |" in lines[2]  # the strongest first
    assert next(x for x in lines if "| position " in x).endswith(f"| yes {MARK} | no | **no** |")
    assert next(x for x in lines if "| random 0.1" in x).endswith("| no | no | **no** |")
    assert "| 3 (fewer than 10: not tested) | – | – |" in next(x for x in lines if "random (seed=1)" in x)
    assert next(x for x in lines if "| LDS |" in x).endswith("| not checked (fewer than 10 pairs) |")


def test_lower_is_better_the_marks_follow_the_direction():
    """RISE (lower is better): a control below the best method on every example is significantly better, one above
    it on every example is worse."""
    rise = {"label": "RISE", "key": "RISE", "higher_is_better": False}
    flash = 0.2 + 0.01 * np.arange(12)
    values = {"t": {"RISE": {"flash": _per(flash), "copy_match": _per(flash - 0.05 - 0.001 * np.arange(12)),
                             "random": _per(flash + 0.3)}}}
    rows = control_rows(["t"], ["flash", "copy_match", "random"], [rise], report_cells(values), values, MinExamples(10),
                        StatsSettings())
    by = {c["control"]: c for c in rows[0]["controls"]}
    assert by["copy_match"]["significantly_better"] and by["copy_match"]["ci_high"] < 0
    assert not by["random"]["at_least_as_good"] and by["random"]["ci_low"] > 0
    assert marks(rows) == {("t", "copy_match", "RISE"): MARK_BETTER} and rows[0]["beaten"] == ["flash"]


def test_a_one_example_sweep_marks_nothing():
    """Every method scored on one example (a smoke sweep, MinExamples(0)): no control is tested, none is marked."""
    values = {"t": {"Recall": {"flash": {"e0": 0.4}, "random": {"e0": 0.9}, "copy_match": {"e0": 0.1}},
                    "LDS": {"flash": {"e0": 0.2}, "random": {"e0": 0.2}}}}
    rows = control_rows(["t"], ["flash", "copy_match", "random"], [R, LDS], report_cells(values), values,
                        MinExamples(0), StatsSettings())
    assert marks(rows) == {} and all(r["informative"] is None and r["holm_family"] == 0 for r in rows)
    assert all(c["too_few"] and c["n"] == 1 for r in rows for c in r["controls"])
    assert verdict("t", rows) == ("Recall cannot be checked: only 1 paired example (fewer than 10); LDS cannot be "
                                  "checked: only 1 paired example (fewer than 10).")
    # the threshold is an argument: with min_paired=1 the same pairs are tested (and no test can separate them)
    tested = control_rows(["t"], ["flash", "copy_match", "random"], [R, LDS], report_cells(values), values,
                          MinExamples(0), StatsSettings(), min_paired=1)
    assert tested[0]["holm_family"] == 3 and set(marks(tested).values()) == {MARK}


# --- the family ----------------------------------------------------------------------------------------------------

def _worse_at_p_0_027():
    """Task "a": random below flash on 10 of 12 examples (differences 0.01 x rank, ranks 1, 3, 7 the other way):
    Wilcoxon exact p = 0.0269, bootstrap interval below 0. Tasks "b", "c", "d": random equal to flash (p = 1)."""
    flash = 0.5 + 0.01 * np.arange(12)
    d = 0.01 * np.array([-k if k in (1, 3, 7) else k for k in range(1, 13)])
    out = {"a": {"Recall": {"flash": _per(flash), "random": _per(flash - d)}}}
    for task in "bcd":
        out[task] = {"Recall": {"flash": _per(flash), "random": _per(flash)}}
    return out


def test_a_control_one_test_finds_worse_is_not_worse_after_holm_over_the_family():
    values = _worse_at_p_0_027()
    cells = report_cells(values)
    (alone,) = control_rows(["a"], ["flash", "random"], [R], cells, values, MinExamples(10), StatsSettings())
    (c,) = alone["controls"]
    assert c["p_value"] == pytest.approx(0.0269, abs=1e-4) and c["p_holm"] == c["p_value"] and c["ci_high"] < 0
    assert alone["informative"] is True and not c["at_least_as_good"] and marks([alone]) == {}
    # the same test among the report's 4 (one per task): Holm p = 4 x 0.0269 > 0.05, the control is not worse
    rows = control_rows(["a", "b", "c", "d"], ["flash", "random"], [R], cells, values, MinExamples(10),
                        StatsSettings())
    (c,) = rows[0]["controls"]
    assert c["p_value"] == pytest.approx(0.0269, abs=1e-4) and c["p_holm"] == pytest.approx(4 * c["p_value"])
    assert c["at_least_as_good"] and not c["significantly_better"] and rows[0]["informative"] is False
    assert marks(rows) == {(t, "random", "Recall"): MARK for t in "abcd"}
    assert verdict("a", rows) == ("Recall (random 0.508 against flash 0.555: not worse) is not informative on this "
                                  "variant (Holm over the 4 tests of this table).")
    assert "| 12 | 0.027 | 0.11 |" in "\n".join(markdown(controls_table(rows)))
