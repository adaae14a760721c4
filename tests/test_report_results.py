"""The results module: the long-format rows, one table rendered as Markdown, CSV and HTML with the same cells, the
pages from the template files, and the one heat-map renderer both heat-map pages use."""

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from ctxbench.reporting import heatmap
from ctxbench.reporting.aggregate import table1_layout, task_n
from ctxbench.reporting.html import method_heatmap, write_example_data, write_run_html
from ctxbench.reporting.plots import heatmap_html
from ctxbench.reporting.render import csv_text, html, markdown
from ctxbench.reporting.results_table import (Cell, MinExamples, Row, Table, common_examples, comparison_tables,
                                              rows_from_cells, too_few_rows,
                                              rows_from_summary, summary_tables)
from ctxbench.reporting.tables import markdown_summary

SRC = Path(__file__).resolve().parents[1] / "src" / "ctxbench"

DESCRIPTIONS = {
    "faithfulness": {"title": "Faithfulness", "metrics": [
        {"key": "RISE", "label": "RISE", "higher_is_better": False},
        {"key": "MAS", "label": "MAS", "higher_is_better": False}]},
    "recovery": {"title": "Recovery", "metrics": [{"key": "recall", "label": "Recall@10%", "higher_is_better": True}]}}
CI = {"mean": 0.25, "std": 0.1, "n": 2, "ci_low": 0.125, "ci_high": 0.375}
SUMMARY = {
    "views": ["seq", "row"], "scorers": DESCRIPTIONS,
    "methods": {
        "ifr": {"examples": 3, "avg_attribution_s": 1.5, "avg_total_s": 2.25,
                "faithfulness": {v: {"RISE": CI, "MAS": {"mean": 0.5, "std": 0.2, "n": 3}} for v in ("seq", "row")},
                "recovery": {"seq": {"recall": {"mean": 0.75, "std": 0.0, "n": 2}}}},  # no row figure
        "a<b>": {"examples": 3, "avg_attribution_s": 0.5,  # an old summary: no avg_total_s
                 "faithfulness": {v: {"RISE": {"mean": 0.125, "std": 0.0, "n": 3}, "MAS": CI}
                                  for v in ("seq", "row")}}},
    "comparisons": [{"mode": "faithfulness", "view": "seq", "metric": "RISE", "label": "RISE", "a": "ifr", "b": "a<b>",
                     "n": 2, "diff": 0.125, "ci_low": 0.05, "ci_high": 0.2, "p_value": 0.01, "better": "b",
                     "significant": True}]}


class Grid(HTMLParser):
    """Every table of a page as rows of cell texts (``**`` around bold text, as Markdown writes it)."""

    def __init__(self, text):
        super().__init__()
        self.tables, self.cell = [], None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = ""
        elif tag == "b" and self.cell is not None:
            self.cell += "**"

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append(self.cell)
            self.cell = None
        elif tag == "b" and self.cell is not None:
            self.cell += "**"

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def md_grid(lines):
    return [[c.strip() for c in line[1:-1].split(" | ")] for line in lines if not line.startswith("|---")]


def plain(grid):
    return [[c.replace("**", "") for c in row] for row in grid]


def test_rows_from_a_summary_are_long_format():
    rows = rows_from_summary(SUMMARY, dataset="niah_mq_q2")
    assert len(rows) == 2 * 2 + 2 + 2 * 2  # ifr: faithfulness 2 views x 2 metrics, recovery 2 views; a<b>
    r = next(r for r in rows if (r.method, r.mode, r.view, r.metric) == ("ifr", "faithfulness", "row", "RISE"))
    assert (r.dataset, r.mean, r.ci_low, r.ci_high, r.n, r.examples) == ("niah_mq_q2", 0.25, 0.125, 0.375, 2, (3,))
    assert (r.attribution_s, r.total_s, r.higher_is_better, r.name) == (1.5, 2.25, False, "ifr")
    missing = next(r for r in rows if (r.method, r.mode, r.view) == ("ifr", "recovery", "row"))
    assert missing.n is None and missing.mean is None and not missing.scored
    old = next(r for r in rows if r.method == "a<b>")
    assert old.total_s == 0.5  # the attribution time when the summary has no total
    # a Table-1 cell of a method run under another setting keeps both names
    cells = {("t", "m (hops=3)"): {"runs_n": {18, 20}, "stats": {"Recall@10%": CI}, "method": "m", "setting": "hops=3",
                                   "Recall@10%": 0.25}}
    [cell_row] = rows_from_cells(["t"], ["m (hops=3)"], DESCRIPTIONS["recovery"]["metrics"], cells, view="row")
    assert (cell_row.method, cell_row.setting, cell_row.name, cell_row.examples) == ("m", "hops=3", "m (hops=3)",
                                                                                      (18, 20))


def test_one_table_in_three_formats_carries_the_same_cells():
    rows = rows_from_summary(SUMMARY)
    faith, rec = summary_tables(rows, DESCRIPTIONS, SUMMARY["views"])
    for table in (faith, rec, *comparison_tables(SUMMARY["comparisons"], DESCRIPTIONS, SUMMARY["views"])):
        want = table.grid()
        md = md_grid(markdown(table))
        page = Grid(html(table)).tables[0]
        sheet = list(csv.reader(io.StringIO(csv_text(table))))
        assert plain(md) == want and plain(page) == want and sheet == want
        assert md == page  # the same cells in bold too
    # the scored column: the examples with a figure of those the method ran on, in every format
    assert faith.columns[-3:] == ("scored", "attribution s/example", "total s/example")
    assert faith.grid()[1] == ["ifr", "0.250 [0.125, 0.375]", "0.500 ± 0.200", "0.250 [0.125, 0.375]",
                               "0.500 ± 0.200", "2/3", "1.50", "2.25"]
    assert rec.grid()[1] == ["ifr", "0.750 ± 0.000", "–", "2/3", "1.50", "2.25"]
    assert rec.grid()[2:] == []  # a<b> was not scored by recovery
    comparison = comparison_tables(SUMMARY["comparisons"], DESCRIPTIONS, SUMMARY["views"])[0]
    assert markdown(comparison)[2] == "| ifr | a<b> | Seq | 2 | **+0.125 [+0.050, +0.200], p=0.01** (a<b> better) | – |"
    assert "<th>a&lt;b&gt;</th>" in html(comparison)  # escaped on the page, as it is in the data


def test_table1_layout_in_three_formats():
    metrics = [{"key": "recall", "label": "Recall@10%", "higher_is_better": True},
               {"key": "RISE", "label": "RISE", "higher_is_better": False},
               {"key": "MAS", "label": "MAS", "higher_is_better": False}]  # no figure: left out
    cells = {("a", "m1"): {"runs_n": {3}, "Recall@10%": 0.5, "RISE": 0.2, "MAS": None,
                           "stats": {"Recall@10%": {"mean": 0.5, "n": 3}, "RISE": {"mean": 0.2, "std": 0.0, "n": 3}}},
             ("a", "m2"): {"runs_n": {2, 3}, "Recall@10%": 0.25, "RISE": None, "MAS": None,
                           "stats": {"Recall@10%": {"mean": 0.25, "std": 0.1, "n": 2, "ci_low": 0.0, "ci_high": 0.5}}},
             ("b", "m1"): {"runs_n": {4}, "Recall@10%": None, "RISE": None, "MAS": None, "stats": {}}}
    table = table1_layout(["a", "b"], ["m1", "m2"], metrics, cells, min_n=1)
    assert table.title == "↑ higher, ↓ lower is better"
    assert table.grid() == [["task (N)", "method", "n", "Recall@10% ↑", "RISE ↓"],
                            ["a (3)", "m1", "3", "0.500", "0.200 ± 0.000"],
                            ["", "m2", "2", "0.250 [0.000, 0.500]", "–"],
                            ["b (4)", "m1", "–", "–", "–"]]
    md, page = md_grid(markdown(table)), Grid(html(table)).tables[0]
    assert md == page and md[1] == ["a (3)", "m1", "3", "**0.500**", "0.200 ± 0.000"]  # a single RISE: no best
    assert list(csv.reader(io.StringIO(csv_text(table)))) == table.grid()
    assert html(table).count('<td class="best">') == 1 and html(table).count('<tr class="task-start">') == 2
    # under min_examples: "too few (n)", never bold
    few = table1_layout(["a"], ["m1", "m2"], metrics, cells, min_examples=3, min_n=1)
    assert md_grid(markdown(few))[1:] == [["a (3)", "m1", "3", "**0.500**", "0.200 ± 0.000"],
                                          ["", "m2", "2", "too few (2)", "–"]]
    # a method with a minimum of its own (IG in the paper's protocol): its figure over fewer examples than the
    # report's minimum, with its n, never bold even where its mean is the best
    cells[("a", "m2")]["stats"]["Recall@10%"]["mean"] = 0.75
    own = table1_layout(["a"], ["m1", "m2"], metrics, cells, min_examples=MinExamples(3, {"m2": 2}), min_n=1)
    assert md_grid(markdown(own))[1:] == [["a (3)", "m1", "3", "**0.500**", "0.200 ± 0.000"],
                                          ["", "m2", "2", "0.750 [0.000, 0.500] (n=2)", "–"]]
    assert md_grid(markdown(table1_layout(["a"], ["m1", "m2"], metrics, cells, min_n=1,
                                          min_examples=MinExamples(3, {"m2": 4}))))[2] == ["", "m2", "2", "too few (2)",
                                                                                          "–"]


def test_rows_on_fewer_than_ten_examples_leave_the_table_for_the_list_under_it():
    """A method scored on 3 examples (IG's unfinished run) beside methods on 20: its row is not in the table (no
    interval or test from fewer than 10 examples), it is listed with its n, and the task's N is the 20 most rows
    share, never "3/20"."""
    metrics = [{"key": "RISE", "label": "RISE", "higher_is_better": False}]
    cells = {("a", me): {"runs_n": {n}, "RISE": 0.1 * i, "method": me,
                         "stats": {"RISE": {"mean": 0.1 * i, "n": n, "ci_low": 0.0, "ci_high": 1.0}}}
             for i, (me, n) in enumerate([("m1", 20), ("ig", 3), ("m2", 20), ("m3", 12)], 1)}
    methods = ["m1", "ig", "m2", "m3"]
    grid = table1_layout(["a"], methods, metrics, cells).grid()
    assert [r[1] for r in grid[1:]] == ["m1", "m2", "m3"] and [r[2] for r in grid[1:]] == ["20", "20", "12"]
    assert grid[1][0] == "a (20)"
    rows = rows_from_cells(["a"], methods, metrics, cells)
    assert too_few_rows(rows, "a", ["RISE"]) == [("ig", 3)]
    assert common_examples(rows, "a", ["RISE"]) == 20
    assert task_n(cells, "a", methods) == 20
    # the floor is the report's stats.min_n: at 3 the IG row is back, with its n
    assert [r[1] for r in table1_layout(["a"], methods, metrics, cells, min_n=3).grid()[1:]] == methods


def test_summary_md_and_the_job_page_show_the_same_tables(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "summary.json").write_text(json.dumps(SUMMARY))
    lines = markdown_summary(SUMMARY["methods"], DESCRIPTIONS, SUMMARY["views"], "t",
                             SUMMARY["comparisons"]).splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("| ") and not lines[i - 1].startswith("|")]
    md_tables = [md_grid([x for x in _rows_from(lines, i)]) for i in starts]
    page = Grid(write_run_html(job, "t", examples=0).read_text()).tables
    assert len(page) == 3 and page == md_tables  # faithfulness, recovery, the comparisons


def _rows_from(lines, i):
    while i < len(lines) and lines[i].startswith("|"):
        yield lines[i]
        i += 1


def test_both_heat_map_pages_use_the_one_renderer(tmp_path, monkeypatch):
    tokens, weights = [" a", " b", " c\x01", " d"], np.array([1.0, -2.0, 0.5, 0.0])
    calls = []
    original = heatmap.strip

    def spy(*args, **kwargs):
        calls.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(heatmap, "strip", spy)
    per_method = heatmap_html(tokens, weights, title="m on e", gold=[1], generated=[" x"])
    assert calls == [tokens]
    job = tmp_path / "job"
    job.mkdir()
    (job / "summary.json").write_text(json.dumps({"methods": {}, "views": ["seq"], "scorers": {}}))
    write_example_data(job, "e", tokens=tokens, generated=[" x"], gold=[1], sink_span=[0, 0],
                       methods={"m": method_heatmap(SimpleNamespace(hop_vectors=None, rho=None), {"seq": weights})})
    report = write_run_html(job, "t", examples=1).read_text()
    assert calls[1:] == [tokens, [" x"]]  # the prompt strip and the generation strip of the panel

    def styles(page):
        return {int(i): s for i, s in re.findall(r'<span class="tok[^"]*" data-i="(\d+)" style="([^"]*)"',
                                                  page.split("<div class=\"gen\">")[0])}

    # one rule: signed, scaled to the largest |weight|: the negative weight is full blue on both pages
    assert styles(per_method) == styles(report) == {0: "background:rgba(220,38,38,0.50)",
                                                    1: "background:rgba(37,99,235,1.00)",
                                                    2: "background:rgba(220,38,38,0.25)"}
    assert heatmap.shade_css(-100) == "rgba(37,99,235,1.00)" and heatmap.shade_css(0) == ""
    # the page's script switches shades with the same colours
    assert "const COLOURS = " + json.dumps(heatmap.colours(), separators=(",", ":")) in report
    # autoescaped text, control characters as U+FFFD
    assert " c\ufffd" in per_method and " c\ufffd" in report and "\x01" not in per_method + report


def test_no_markup_in_the_reporting_code():
    """The pages come from the template files: no element is written from a Python string."""
    tags = re.compile(r"<(?:/?)(?:html|head|body|table|thead|tbody|tr|td|th|span|div|p|b|h\d|script|style|details|"
                      r"summary|section|button|figure|img)\b[^>]*>")
    for path in sorted((SRC / "reporting").glob("*.py")):
        assert not tags.findall(path.read_text(encoding="utf-8")), path
    templates = sorted(p.name for p in (SRC / "resources" / "templates").iterdir())
    assert [t for t in templates if not t.endswith(".md.j2")] == [
        "heatmap.css", "heatmap.html.j2", "macros.html.j2", "page.css", "report.html.j2", "report.js"]


def test_a_cell_renders_alike_everywhere():
    table = Table(("A", "figure"), (Row((Cell("x"), Cell("0.1", "[0.0, 0.2]", "(x better)", strong=True))),))
    assert markdown(table)[2] == "| x | **0.1 [0.0, 0.2]** (x better) |"
    assert "<td><b>0.1 <span class=\"ci\">[0.0, 0.2]</span></b> (x better)</td>" in html(table)
    assert csv_text(table).splitlines()[1] == 'x,"0.1 [0.0, 0.2] (x better)"'


def test_a_headline_column_only_one_method_was_scored_on_is_left_to_pairs_md():
    """Gold's faith lane predates the common sets: only FlashTrace has a RISE@nonstop figure there. A column that
    compares fewer than two rows on every task is not a headline column (nor a controls check); one that compares
    two is, and the metrics outside HEADLINE_KEYS never are."""
    from ctxbench.reporting.aggregate import headline_metrics

    metrics = [{"key": k, "label": k, "higher_is_better": False} for k in ("RISE", "RISE@all", "RISE@nonstop")]
    fig = {"mean": 0.2, "n": 20}
    cells = {("t", "flash"): {"method": "flash", "stats": {"RISE": fig, "RISE@all": fig, "RISE@nonstop": fig}},
             ("t", "ifr"): {"method": "ifr", "stats": {"RISE": fig, "RISE@all": fig}},
             ("u", "ifr"): {"method": "ifr", "stats": {"RISE@nonstop": fig}}}
    got = headline_metrics(metrics, ["t", "u"], ["flash", "ifr"], cells, MinExamples(10))
    assert [m["key"] for m in got] == ["RISE@all"]
    # under a report's minimum the second row does not count
    assert headline_metrics(metrics, ["t"], ["flash", "ifr"], cells, MinExamples(30)) == metrics[1:]
