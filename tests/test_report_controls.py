"""The report's controls: the best method against each control by the paired test, the marks on the control cells
that are at least as good, and the verdict sentence, on hand-made figures; the Table-1 layout shows both (Holm's
correction, the two marks and the too-few rule: test_control_marks.py)."""

import numpy as np
import pytest

from ctxbench.reporting.controls import (MARK, MARK_BETTER, any_control, control_rows, controls_table, is_control,
                                         marks, verdict)
from ctxbench.reporting.render import markdown
from ctxbench.reporting.results_table import MinExamples, rows_from_cells, table1_table
from ctxbench.metrics.stats import StatsSettings

from helpers.records import report_cells

IDS = [f"e{i}" for i in range(12)]
R = {"label": "Recall", "key": "recall", "higher_is_better": True}
RISE = {"label": "RISE", "key": "RISE", "higher_is_better": False}


def _per(values):
    return dict(zip(IDS, values))


def _cells(values):
    """``{("t", method): cell}`` with the means of ``values[label][method]``."""
    return report_cells({"t": values})


def _values():
    rng = np.random.default_rng(0)
    good = 0.8 + 0.05 * rng.random(12)
    return {"Recall": {"flash": _per(good), "attention": _per(good - 0.3),
                       "copy_match": _per(good + 0.05),  # above the best method on every example
                       "random": _per(0.1 + 0.01 * rng.random(12))},
            "RISE": {"flash": _per(0.1 + 0.01 * rng.random(12)), "attention": _per(0.4 + 0.01 * rng.random(12))}}


def test_a_control_at_least_as_good_as_the_best_method_is_marked_and_the_metric_not_informative():
    values = _values()
    cells = _cells(values)
    methods = ["flash", "attention", "copy_match", "random"]
    rows = control_rows(["t"], methods, [RISE, R], cells, {"t": values}, MinExamples(10), StatsSettings())
    rise, rec = rows
    assert rise["best"] == "flash" and rise["controls"] == [] and rise["informative"] is None
    assert rec["best"] == "flash" and rec["control"] == "copy_match" and rec["informative"] is False
    by = {c["control"]: c for c in rec["controls"]}
    assert by["copy_match"]["at_least_as_good"] and not by["random"]["at_least_as_good"]
    assert by["copy_match"]["significantly_better"] and by["copy_match"]["p_holm"] == 2 * by["copy_match"]["p_value"]
    assert by["copy_match"]["diff"] == pytest.approx(0.05)
    assert by["random"]["n"] == 12 and by["random"]["p_value"] < 0.01
    assert rec["beaten"] == ["flash", "attention"] and rec["methods"] == 2
    assert marks(rows) == {("t", "copy_match", "Recall"): MARK_BETTER}  # above on every example: significantly
    said = verdict("t", rows)
    assert said.startswith("Recall (copy_match ") and ": significantly better) is not informative on this variant " \
        "(Holm over the 2 tests of this table)" in said
    assert "RISE cannot be checked (no control was scored with it on the same examples)" in said
    # the table: the control named, its cell marked
    table = table1_table(rows_from_cells(["t"], methods, [RISE, R], cells), [RISE, R], 10, marks=marks(rows),
                         controls=is_control)
    grid = table.grid()
    recall = next(i for i, h in enumerate(grid[0]) if h.startswith("Recall"))
    copy = next(r for r in grid if r[1].startswith("copy_match"))
    assert copy[1] == "copy_match (control)" and copy[recall].endswith(MARK_BETTER)
    assert not next(r for r in grid if r[1] == "flash")[recall].endswith((MARK, MARK_BETTER))
    md = "\n".join(markdown(controls_table(rows)))
    assert any_control(rows) and not any_control([{**r, "controls": []} for r in rows])
    assert "| t | Recall | flash 0.8" in md and "| 12 | 0.00049 | 0.00098 | 2 | yes | **yes §** | **no** |" in md


def test_a_best_method_that_beats_every_control_is_informative():
    values = _values()
    del values["Recall"]["copy_match"]
    cells = _cells(values)
    rows = control_rows(["t"], ["flash", "attention", "random"], [R], cells, {"t": values}, MinExamples(10),
                        StatsSettings())
    (rec,) = rows
    assert rec["informative"] is True and rec["control"] == "random" and rec["beaten"] == []
    assert marks(rows) == {}
    assert verdict("t", rows) == ("Recall tells the best method from the controls (it beats every control; Holm over "
                                  "the 1 test of this table).")


def test_a_figure_under_the_minimum_is_not_ranked():
    values = _values()
    cells = _cells(values)
    cells[("t", "copy_match")]["stats"]["Recall"]["n"] = 3  # shown as "too few (3)" by the table
    rows = control_rows(["t"], ["flash", "attention", "copy_match", "random"], [R], cells, {"t": values},
                        MinExamples(10), StatsSettings())
    assert [c["control"] for c in rows[0]["controls"]] == ["random"] and rows[0]["informative"] is True


def test_controls_by_name():
    assert is_control("copy_match") and is_control("random") and is_control("position (seed=3)")
    assert not is_control("ifr_multi_hop_both") and not is_control("copy")


def test_the_variants_page_names_the_controls_and_keeps_their_marks():
    from ctxbench.reporting.protocol import variants_markdown

    fig = {"mean": 0.9, "n": 12}
    t = {"caption": "evidence CoT (labelled synthetic)", "datasets": ["t"], "min_examples": 10,
         "cells": [{"dataset": "t", "method": "flash", "n": 12, "figures": {"Recall@10%": {"mean": 0.6, "n": 12},
                                                                             "LDS": {"mean": 0.4, "n": 12}}},
                   {"dataset": "t", "method": "copy_match", "n": 12, "figures": {"Recall@10%": fig}}],
         "controls": [{"dataset": "t", "metric": "Recall@10%", "controls": [
             {"control": "copy_match", "at_least_as_good": True}]}]}
    md = variants_markdown([("runs/ev/report", t)], {})
    assert f"| copy_match (control) | – / – / – | – / – / 0.900{MARK} / – |" in md
    assert "| flash | – / – / – | – / – / 0.600 / 0.400 |" in md  # RISE / MAS / Recall@10% / LDS


def test_the_overview_renders_every_figure_from_the_reports_table1_json():
    """overview.md (reporting.overview): per task and metric the order best first and the control check, every
    number on the page taken from the report's table1.json (its cells and its controls rows)."""
    import re

    from ctxbench.reporting.overview import control_wins, metric_order, overview_markdown

    values = _values()
    cells = _cells(values)
    methods = ["flash", "attention", "copy_match", "random"]
    rows = control_rows(["t"], methods, [RISE, R], cells, {"t": values}, MinExamples(10), StatsSettings())
    cells[("t", "few")] = {"method": "few", "runs_n": {3}, "stats": {"Recall": {"mean": 0.99, "n": 3}}}
    # what write_table1 saves, reduced to the keys the overview reads; "Recall@10%" is the headline label
    rename = {"Recall": "Recall@10%", "RISE": "RISE@all"}
    t = {"caption": "synthetic", "models": ["m"], "datasets": ["t"], "stats": {"min_n": 10},
         "metrics": [{**m, "label": rename[m["label"]]} for m in (RISE, R)],
         "cells": [{"dataset": "t", "method": me, "n": max(c["runs_n"]),
                    "figures": {rename[k]: v for k, v in c["stats"].items()}} for (_, me), c in cells.items()],
         "controls": [{**r, "metric": rename[r["metric"]]} for r in rows]}
    order = metric_order(t, "t", "Recall@10%")
    assert [r["method"] for r in order] == ["copy_match", "flash", "attention", "random"]  # "few": 3 examples
    assert order[0]["mark"] == MARK_BETTER and order[0]["control"]
    assert control_wins(t) == [("t", "Recall@10%", "copy_match", "flash")]
    md = overview_markdown([("runs/x/report", t)])
    assert "## synthetic (m)" in md and "**copy_match significantly better** than the best method (flash)" in md
    assert "flash beats every control" not in md
    assert "| t | Recall@10% | copy_match | flash |" in md  # the list of control wins
    line = next(x for x in md.splitlines() if x.startswith("| t | 12 | Recall@10% |"))
    figures = [float(x) for x in re.findall(r"\d\.\d{3}", line)]
    assert figures == [round(r["mean"], 3) for r in order]  # each figure is a cell's mean, in the order shown
    assert "few" not in md
