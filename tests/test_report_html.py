"""report.html: structure on a hand-made job dir (escaping, gold and top marks, every method, no outside reference,
cutting long prompts), the report command's page, and the page in a real browser (Debian's chromium via playwright)."""

import json
import re
import time
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ctxbench.core.errors import DataError
from ctxbench.metrics.faithfulness import FaithfulnessScorer
from ctxbench.metrics.recovery import RecoveryScorer
from ctxbench.reporting.html import (MAX_TOKENS, PAGE, TOP_K, method_heatmap, read_examples, shades,
                                     shown_positions, write_example_data, write_report_html, write_run_html)
from ctxbench.reporting.curves import deletion_curve_plots
from helpers.browser import CHROMIUM_ARGS, chromium_path

P, G = 30, 6
EVIL = "<script>alert('x')</script>"
TOKENS = [f" t{i}" for i in range(P)]
TOKENS[5] = EVIL  # model text may hold HTML
TOKENS[6] = " a & b\n"
GOLD = [3, 4, 5]
# attention: weight i on token i -> its top 10 are tokens 29..20.
ATTN = np.arange(P, dtype=float)
# ifr seq view: the gold tokens first, then 10..16 descending; everything else 0 or negative.
IFR_SEQ = np.zeros(P)
IFR_SEQ[[3, 4, 5]] = [9.0, 8.0, 7.0]
IFR_SEQ[10:17] = [6.0, 5.0, 4.0, 3.0, 2.0, 1.5, 1.0]
IFR_SEQ[20] = -18.0
IFR_TOP = [3, 4, 5, 10, 11, 12, 13, 14, 15, 16]  # only 10 positive weights: the top 10 by hand
# two hops over P + G columns: hop 0 on token 0 and on the generation, hop 1 on tokens 7 and 8.
HOP0 = np.zeros(P + G)
HOP0[0], HOP0[P:] = 2.0, 1.0
HOP1 = np.zeros(P + G)
HOP1[[7, 8]] = [4.0, 1.0]
SINK = [4, 5]


def result(hops=None, rho=None):
    return SimpleNamespace(hop_vectors=hops, rho=rho)


def scorer_descriptions():
    return {"faithfulness": FaithfulnessScorer().describe(), "recovery": RecoveryScorer(fraction=0.1).describe()}


def make_job(job: Path, examples=("q<1>", "q2"), title_suffix="") -> Path:
    """A job dir as run_exp leaves it: results.jsonl, summary.json, a deletion-curve PNG and heat-map data."""
    job.mkdir(parents=True)
    curves = {"seq": {"curve": [0.0, -1.0, -2.0]}, "row": {"curve": [0.0, -0.5, -2.0]}}
    records = [{"example_id": e, "method": m, "faithfulness": curves} for e in examples for m in ("ifr_multi_hop",
                                                                                                 "attention")]
    (job / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    stat = {"mean": 0.25, "std": 0.1, "n": 2}
    ci = dict(stat, ci_low=0.125, ci_high=0.375)
    methods = {m: {"examples": 2, "avg_attribution_s": 1.5,
                   "faithfulness": {v: {k: stat for k in ("RISE", "MAS", "RISE+AP")} for v in ("seq", "row")},
                   "recovery": {v: {"recall": ci} for v in ("seq", "row")}} for m in ("ifr_multi_hop", "attention")}
    comparisons = [{"mode": "recovery", "view": "seq", "metric": "recall", "label": "Recall@10%", "a": "ifr_multi_hop",
                    "b": "attention", "n": 2, "diff": 0.5, "ci_low": 0.25, "ci_high": 0.75, "p_value": 0.03,
                    "better": "a", "significant": True}]
    (job / "summary.json").write_text(json.dumps({"methods": methods, "views": ["seq", "row"],
                                                  "scorers": scorer_descriptions(), "comparisons": comparisons}))
    deletion_curve_plots(records, ["seq"], job)
    for e in examples:
        write_example_data(job, e, tokens=TOKENS, generated=[" x", " <b>", " y", " 4", "2", "</div>"], gold=GOLD,
                           sink_span=SINK, methods={
                               "ifr_multi_hop": method_heatmap(result(np.stack([HOP0, HOP1]), [0.5, 0.25]),
                                                               {"seq": IFR_SEQ, "row": IFR_SEQ[::-1]})})
        # a second call (a resumed run) adds a method and keeps the first
        write_example_data(job, e, tokens=TOKENS, generated=[" x", " <b>", " y", " 4", "2", "</div>"], gold=GOLD,
                           sink_span=SINK, methods={"attention": method_heatmap(result(), {"seq": ATTN, "row": ATTN})})
    return job


class Dom(HTMLParser):
    """Elements as (tag, attrs, text of the element's own leaf text); enough to query spans and panels."""

    def __init__(self, text):
        super().__init__()
        self.elements, self.stack, self.scripts = [], [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        el = {"tag": tag, "attrs": dict(attrs), "text": "", "parents": [e["attrs"] for e in self.stack]}
        self.elements.append(el)
        if tag not in ("meta", "link", "img", "br"):
            self.stack.append(el)

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()["tag"] == tag:
                break

    def handle_data(self, data):
        if self.stack:
            self.stack[-1]["text"] += data
            if self.stack[-1]["tag"] == "script":
                self.scripts.append(data)

    def spans(self, panel_id, cls):
        return [e for e in self.elements if e["tag"] == "span" and cls in e["attrs"].get("class", "").split()
                and any(p.get("id") == panel_id for p in e["parents"])]


def panel_ids(dom, example):
    return {e["attrs"]["data-method"]: e["attrs"]["id"] for e in dom.elements
            if "panel" == e["attrs"].get("class") and e["attrs"]["id"].startswith(example + "-")}


def data_block(page):
    return json.loads(re.search(r"<script type='application/json' id='ctxbench-data'>(.*?)</script>", page,
                                re.S).group(1))


def test_run_page_structure(tmp_path):
    job = make_job(tmp_path / "job")
    path = write_run_html(job, "run <one>", examples=5)
    assert path == job / PAGE
    page = path.read_text()
    dom = Dom(page)
    # Tables: the interval when the summary has one, else mean ± std; the paired comparison row.
    assert "0.250 <span class=\"ci\">[0.125, 0.375]</span>" in page
    assert "0.250 <span class=\"ci\">± 0.100</span>" in page
    # the tables of summary.md: the examples scored of those run, and the comparisons per scorer, pair and view
    assert "<th>scored</th><th>attribution s/example</th>" in page and "<td>2/2</td><td>1.50</td>" in page
    assert ("<tr><th>ifr_multi_hop</th><th>attention</th><td>Seq</td><td>2</td>"
            "<td><b>+0.500 [+0.250, +0.750], p=0.03</b> (ifr_multi_hop better)</td></tr>") in page
    # Both examples, in results order, each with a panel per method.
    sections = [e["attrs"]["id"] for e in dom.elements if e["attrs"].get("class") == "example"]
    assert sections == ["ex0", "ex1"]
    for ex in sections:
        panels = panel_ids(dom, ex)
        assert set(panels) == {"ifr_multi_hop", "attention"}
        for pid in panels.values():
            assert [int(s["attrs"]["data-i"]) for s in dom.spans(pid, "gold")] == GOLD
            assert [s["text"] for s in dom.spans(pid, "gold")][2] == EVIL  # the text, as text
            assert [int(s["attrs"]["data-i"]) for s in dom.spans(pid, "sink")] == [P_ for P_ in range(4, 6)]
            assert len(dom.spans(pid, "tok")) == P + G  # short prompt: every token shown, no gap
            assert not dom.spans(pid, "gap")
        # Top tokens by hand: attention's are 29..20, ifr's the 10 positive weights (seq view shown first).
        assert sorted(int(s["attrs"]["data-i"]) for s in dom.spans(panels["attention"], "top")) == list(range(20, 30))
        assert sorted(int(s["attrs"]["data-i"]) for s in dom.spans(panels["ifr_multi_hop"], "top")) == IFR_TOP
    assert TOP_K == 10
    # Shading: token 3 of ifr carries the largest weight (full red), token 20 the most negative (-18/18: full blue).
    ifr = dom.spans(panel_ids(dom, "ex0")["ifr_multi_hop"], "tok")
    assert ifr[3]["attrs"]["style"] == "background:rgba(220,38,38,0.50)"  # 9 / 18
    assert ifr[20]["attrs"]["style"] == "background:rgba(37,99,235,1.00)"
    # Hop buttons only for the multi-hop method; the view buttons for both.
    buttons = [e["attrs"]["data-key"] for e in dom.elements if e["tag"] == "button"
               and any(p.get("id") == "ex0-m0" for p in e["parents"])]
    assert buttons == ["seq", "row", "hop0", "hop1"]
    assert "hop 1 (ρ=0.25)" in page
    # The figure is inlined.
    assert re.search(r'<img alt="deletion_curve_seq" src="data:image/png;base64,iVBORw0KGgo', page)


def test_escaping_and_no_outside_reference(tmp_path):
    page = write_run_html(make_job(tmp_path / "job"), "t", examples=2).read_text()
    assert EVIL not in page and "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page
    assert "&lt;b&gt;" in page and "&lt;/div&gt;" in page and " a &amp; b\n" in page and "run &lt;" not in page
    # Exactly two script elements (data, code): no token text opened or closed one.
    assert page.count("<script") == 2 and page.count("</script") == 2
    assert "http" not in page.lower() and "//" not in re.sub(r"data:[^\"']*", "", page.split("<script>")[0])
    for attr in re.findall(r"(?:src|href)=[\"']([^\"']*)", page):
        assert attr.startswith("data:"), attr
    assert "@import" not in page and "url(" not in page


def test_hop_and_view_data(tmp_path):
    page = write_run_html(make_job(tmp_path / "job"), "t", examples=1).read_text()
    data = data_block(page)
    assert set(data) == {"ex0-m0", "ex0-m1"}  # the first example only
    ifr = data["ex0-m0"]
    assert list(ifr) == ["seq", "row", "hop0", "hop1"] and list(data["ex0-m1"]) == ["seq", "row"]
    # hop 0: 2.0 on token 0 and 1.0 on every generated token, scaled by 2; hop 1: 4 and 1 on tokens 7, 8.
    assert ifr["hop0"]["c"] == [100] + [0] * (P - 1) and ifr["hop0"]["g"] == [50] * G and ifr["hop0"]["t"] == [0]
    assert ifr["hop1"]["c"][7:9] == [100, 25] and ifr["hop1"]["t"] == [7, 8] and ifr["hop1"]["g"] == [0] * G
    assert ifr["row"]["t"] == [P - 1 - i for i in IFR_TOP]  # the reversed weights
    assert "g" not in ifr["seq"]


def test_shades_and_top_tokens():
    assert shades(np.array([0.0, 1.0, -2.0, 0.5])).tolist() == [0, 50, -100, 25]
    assert shades(np.zeros(3)).tolist() == [0, 0, 0] and shades(np.array([np.nan, 1.0])).tolist() == [0, 100]


def test_long_prompt_is_cut_around_gold_and_top_tokens(tmp_path):
    n = 5000
    rng = np.random.default_rng(0)
    w = rng.random(n) * 0.01
    w[[1000, 4000]] = [1.0, 0.9]
    job = tmp_path / "job"
    job.mkdir()
    (job / "summary.json").write_text(json.dumps({"methods": {}, "views": ["seq"], "scorers": {}}))
    write_example_data(job, "long", tokens=[f"w{i}" for i in range(n)], generated=["a"], gold=[2500, 2501],
                       sink_span=[0, 0], methods={"m": method_heatmap(result(), {"seq": w})})
    dom = Dom(write_run_html(job, "t", examples=1).read_text())
    toks = [int(s["attrs"]["data-i"]) for s in dom.spans("ex0-m0", "tok")][:-1]  # the last is the generated "a"
    top = sorted(np.argsort(-w, kind="stable")[:TOP_K].tolist())
    assert len(toks) <= MAX_TOKENS and {2500, 2501, *top} <= set(toks)
    gaps = [int(re.search(r"(\d+)", g["text"]).group(1)) for g in dom.spans("ex0-m0", "gap")]
    assert sum(gaps) == n - len(toks)  # every left-out token counted once
    assert f"showing {len(toks)} of {n} prompt tokens" in str([e["text"] for e in dom.elements])


def test_shown_positions_by_hand():
    assert shown_positions(5, [2], max_tokens=5) == [0, 1, 2, 3, 4]
    assert shown_positions(20, [10], max_tokens=5, window=8) == [8, 9, 10, 11, 12]  # narrowed to +-2
    assert shown_positions(20, [0, 19], max_tokens=6, window=3) == [0, 1, 2, 17, 18, 19]
    assert shown_positions(100, [5, 50, 90, 7], max_tokens=2, window=1) == [5, 50]  # width 0, priority order
    assert shown_positions(100, [-3, 200], max_tokens=10) == []


def test_examples_in_results_order_and_bad_data(tmp_path):
    job = make_job(tmp_path / "job", examples=("b", "a", "c"))
    assert [e["example_id"] for e in read_examples(job, 2)] == ["b", "a"]
    assert read_examples(job, 0) == [] and read_examples(tmp_path, 3) == []
    (job / "heatmap_data" / "b.json").write_text("{not json")
    with pytest.raises(DataError, match=r"heatmap_data/b\.json:1: not JSON"):
        read_examples(job, 3)
    (job / "heatmap_data" / "b.json").write_text(json.dumps({"tokens": [], "generated": []}))
    with pytest.raises(DataError, match=r"b\.json: field 'methods': missing"):
        read_examples(job, 3)
    bad = {"tokens": ["a", "b"], "generated": ["c"], "methods": {"m": {"views": {"seq": [1.0, 2.0]}, "hops": [[1.0]]}}}
    (job / "heatmap_data" / "b.json").write_text(json.dumps(bad))
    with pytest.raises(DataError, match=r"b\.json: field 'methods.m.hops\[0\]': 1 weights for 2 \+ 1 tokens"):
        read_examples(job, 3)
    bad["methods"]["m"]["views"]["seq"] = [1.0]
    (job / "heatmap_data" / "b.json").write_text(json.dumps(bad))
    with pytest.raises(DataError, match=r"field 'methods.m.seq': 1 weights for 2 prompt tokens"):
        read_examples(job, 3)


def test_report_command_page(tmp_path):
    from ctxbench.reporting.aggregate import table1_layout
    from ctxbench.reporting.render import markdown
    from ctxbench.jobs.results import JobRun

    jobs = [JobRun(make_job(tmp_path / d), {"dataset": {"name": d}}, [], json.loads(
        (tmp_path / d / "summary.json").read_text())) for d in ("niah_a", "niah_b")]
    metrics = [{"key": "recall", "label": "Recall@10%", "higher_is_better": True}]
    cells = {("niah_a", "m1"): {"runs_n": {3}, "Recall@10%": 0.5, "stats": {"Recall@10%": {"mean": 0.5, "n": 3}}},
             ("niah_b", "m1"): {"runs_n": {4}, "Recall@10%": None, "stats": {}},
             ("niah_a", "m2"): {"runs_n": {3}, "Recall@10%": 0.25, "stats": {"Recall@10%": {
                 "mean": 0.25, "std": 0.1, "n": 3, "ci_low": 0.0, "ci_high": 0.5}}}}
    path = write_report_html(jobs, (["niah_a", "niah_b"], ["m1", "m2"], metrics, cells), tmp_path / "report",
                             examples=1, min_n=1)
    page = path.read_text()
    assert path == tmp_path / "report" / PAGE
    # laid out as table1.md: a row per task and method, a column per metric, the task's best mean in bold
    assert ('<thead><tr><th>task (N)</th><th>method</th><th>n</th><th>Recall@10%</th></tr></thead><tbody>'
            '<tr class="task-start"><th>niah_a (3)</th><th>m1</th><td>3</td><td class="best"><b>0.500</b></td></tr>'
            '<tr><th></th><th>m2</th><td>3</td><td>0.250 <span class="ci">[0.000, 0.500]</span></td></tr>'
            '<tr class="task-start"><th>niah_b (4)</th><th>m1</th><td>–</td><td>–</td></tr></tbody>') in page
    md = "\n".join(markdown(table1_layout(["niah_a", "niah_b"], ["m1", "m2"], metrics, cells,
                                          n_of=lambda d: {"niah_a": 3, "niah_b": 4}[d], min_n=1)))
    assert md.splitlines()[2:] == ["| niah_a (3) | m1 | 3 | **0.500** |", "|  | m2 | 3 | 0.250 [0.000, 0.500] |",
                                   "| niah_b (4) | m1 | – | – |"]  # the same rows as the page's
    # at the report's default floor (10 examples) neither 3-example row is in the table
    assert "<th>m2</th>" not in write_report_html(jobs, (["niah_a"], ["m1", "m2"], metrics, cells),
                                                  tmp_path / "r3", examples=0).read_text()
    too_few = write_report_html(jobs, (["niah_a"], ["m1", "m2"], metrics, cells), tmp_path / "r2", examples=0,
                                min_examples=5, min_n=1).read_text()
    assert "<td>too few (3)</td>" in too_few and 'class="best"' not in too_few
    dom = Dom(page)
    assert [e["attrs"]["id"] for e in dom.elements if e["attrs"].get("class") == "example"] == ["j0ex0", "j1ex0"]
    assert set(data_block(page)) == {"j0ex0-m0", "j0ex0-m1", "j1ex0-m0", "j1ex0-m1"}
    assert page.count("<summary>niah_") == 2 and page.count("<details open>") == 1  # one folding section per job


# --- a real browser ------------------------------------------------------------------------------------------------

def test_page_in_chromium(tmp_path):
    from playwright.sync_api import sync_playwright

    page_path = write_run_html(make_job(tmp_path / "job"), "browser check", examples=2)
    t0 = time.perf_counter()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page()
            problems, requests = [], []
            tab.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning")
                   else None)
            tab.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            tab.on("request", lambda r: requests.append(r.url))
            tab.goto(page_path.as_uri())
            tab.wait_for_load_state("load")

            def marked(method, cls):
                return tab.eval_on_selector_all(f"#ex0 .panel[data-method='{method}'] .ctx .tok.{cls}",
                                                "els => els.map(e => Number(e.dataset.i))")

            # The first example shows the gold tokens and each method's top tokens.
            for method in ("ifr_multi_hop", "attention"):
                assert marked(method, "gold") == GOLD
                assert tab.is_visible(f"#ex0 .panel[data-method='{method}'] .tok.gold")
            assert sorted(marked("attention", "top")) == list(range(20, 30))
            assert sorted(marked("ifr_multi_hop", "top")) == IFR_TOP
            # The token holding HTML is text in the page, not an element.
            assert tab.inner_text("#ex0-m0 .ctx .tok[data-i='5']") == EVIL
            assert tab.eval_on_selector_all("#ex0 script", "els => els.length") == 0
            # Hop 1 of the multi-hop method: its top tokens and shades replace the view's.
            tab.click("#ex0-m0 button[data-key='hop1']")
            assert marked("ifr_multi_hop", "top") == [7, 8]
            bg = tab.eval_on_selector("#ex0-m0 .ctx .tok[data-i='7']", "e => getComputedStyle(e).backgroundColor")
            assert bg == "rgb(220, 38, 38)"
            assert tab.inner_text("#ex0-m0 .toplist") == "« t7», « t8»"
            # hop 0 shades the generation too (1.0 of 2.0 on every generated token).
            tab.click("#ex0-m0 button[data-key='hop0']")
            assert tab.eval_on_selector("#ex0-m0 .gen .tok", "e => e.style.background") == "rgba(220, 38, 38, 0.5)"
            # The example-wide Row button switches every panel of that example, and only that one.
            tab.click("#ex0 .allviews button[data-key='row']")
            assert sorted(marked("ifr_multi_hop", "top")) == sorted(P - 1 - i for i in IFR_TOP)
            assert tab.eval_on_selector("#ex0-m0 button.on", "b => b.dataset.key") == "row"
            assert tab.eval_on_selector("#ex1-m0 button.on", "b => b.dataset.key") == "seq"
        finally:
            browser.close()
    print(f"\nchromium: page loaded and checked in {time.perf_counter() - t0:.1f} s")
    assert problems == []
    assert requests and all(u.startswith(("file:", "data:")) for u in requests), requests


def test_report_page_figures_in_chromium(tmp_path):
    """The report's per-task charts (reporting.figures, PNG beside table1.md) are inlined in report.html and every one
    renders in a real browser, with no console error."""
    from playwright.sync_api import sync_playwright

    from ctxbench.jobs.results import JobRun
    from ctxbench.reporting.controls import is_control
    from ctxbench.reporting.figures import deletion_set_chart, interval_chart
    from ctxbench.reporting.results_table import MinExamples

    jobs = [JobRun(make_job(tmp_path / "niah_a"), {"dataset": {"name": "niah_a"}}, [], json.loads(
        (tmp_path / "niah_a" / "summary.json").read_text()))]
    metrics = [{"key": "recall", "label": "Recall@10%", "higher_is_better": True},
               {"key": "lds", "label": "LDS", "higher_is_better": True}]
    fig = {"mean": 0.5, "n": 3, "ci_low": 0.4, "ci_high": 0.6}
    cells = {("niah_a", m): {"method": m, "runs_n": {3}, "stats": {"Recall@10%": fig, "LDS": fig}}
             for m in ("m1", "copy_match")}
    chart = interval_chart("niah_a", ["m1", "copy_match"], metrics, cells, MinExamples(0),
                           tmp_path / "report" / "figures", is_control)
    assert chart == tmp_path / "report" / "figures" / "niah_a.png" and chart.stat().st_size > 1000
    assert interval_chart("niah_b", ["m1"], metrics, cells, MinExamples(0), tmp_path / "report" / "figures",
                          is_control) is None  # no figure of that task: no chart
    # the slope chart of the faithfulness order by deletion set: only where a common set was scored
    assert deletion_set_chart("niah_a", ["m1", "copy_match"], cells, tmp_path / "report" / "figures") is None
    sets = {("niah_a", "m1"): {"RISE": 0.1, "RISE@all": 0.5, "RISE@nonstop": 0.1},
            ("niah_a", "m2"): {"RISE": 0.3, "RISE@all": 0.2, "RISE@nonstop": 0.2}}
    assert deletion_set_chart("niah_a", ["m1", "m2"], sets, tmp_path / "report" / "figures").name == "niah_a.sets.png"
    path = write_report_html(jobs, (["niah_a"], ["m1", "copy_match"], metrics, cells), tmp_path / "report", 0,
                             min_n=1)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page()
            problems = []
            tab.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
            tab.on("pageerror", lambda e: problems.append(str(e)))
            tab.goto(path.as_uri())
            tab.wait_for_load_state("load")
            widths = tab.eval_on_selector_all("figure.chart img", "els => els.map(e => e.naturalWidth)")
        finally:
            browser.close()
    assert len(widths) == 2 and min(widths) > 100 and problems == []


# --- through the stages --------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_run_and_report_commands_write_the_page(tmp_path):
    """run_exp on SmolLM2 (one niah_mq_q2 example at 512 tokens) writes report.html with both methods' heat maps, the
    needles as gold tokens and the multi-hop method's hops; the report command writes one for the job it aggregates."""
    from hydra import compose, initialize_config_dir

    from helpers.paths import CACHE_DIR, ROOT
    from ctxbench.stages.conf import register_configs
    from ctxbench.stages.report import report_stage
    from ctxbench.stages.run import run_stage

    register_configs()
    job = tmp_path / "job"
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="run", overrides=[
            f"paths.root={tmp_path}", f"paths.data_dir={tmp_path / 'data'}", f"paths.model_cache_dir={CACHE_DIR}",
            f"paths.samples_dir={tmp_path / 'cache'}", "dataset=niah_mq_q2", "length=512", "dataset.num_samples=1",
            "max_examples=1", "progress=false", "attribution=[ifr_multi_hop,attention]", "mode=[recovery]",
            "views=[seq,row]", "heatmaps=1"])
        # one example: its row in the table only with the floor at 1 (stats.min_n: no row on fewer examples)
        report_cfg = compose(config_name="report", overrides=[f"runs=[{job}]", "heatmaps=1", "stats.min_n=1"])
    run_stage(cfg, job)
    page = (job / PAGE).read_text()
    dom = Dom(page)
    panels = panel_ids(dom, "ex0")
    assert set(panels) == {"ifr_multi_hop", "attention"}
    # the generated RULER row (top-level "outputs": the needle values)
    [example] = [json.loads(line) for p in (tmp_path / "data").rglob("*.jsonl") for line in p.read_text().splitlines()]
    records = {r["method"]: r for r in map(json.loads, (job / "results.jsonl").read_text().splitlines())}
    data = json.loads(next((job / "heatmap_data").glob("*.json")).read_text())
    for method, pid in panels.items():
        gold_spans = dom.spans(pid, "gold")
        # the gold tokens are the needles: every needle value is in their text
        gold_text = "".join(s["text"] for s in gold_spans)
        assert all(v in gold_text for v in example["outputs"]), (gold_text, example["outputs"])
        assert [int(s["attrs"]["data-i"]) for s in gold_spans] == data["gold"]
        assert len(dom.spans(pid, "top")) == TOP_K
        # the stored weights are the scored ones: Recall@10% recomputed by hand from them (weights kept to 4 digits:
        # a rounding tie may swap one token at the cut)
        w = np.clip(np.asarray(data["methods"][method]["views"]["seq"]), 0, None)
        k = int(np.ceil(0.1 * len(w)))
        top = set(np.argsort(-w, kind="stable")[:k].tolist())
        recall = len(top & set(data["gold"])) / len(data["gold"])
        assert abs(recall - records[method]["recovery"]["seq"]) <= 1 / len(data["gold"]) + 1e-9
    hop_buttons = [e["attrs"]["data-key"] for e in dom.elements if e["tag"] == "button"
                   and any(p.get("id") == panels["ifr_multi_hop"] for p in e["parents"])]
    assert hop_buttons == ["seq", "row", "hop0", "hop1"]  # ifr_multi_hop's default: one hop after hop 0
    assert "<th>ifr_multi_hop</th>" in page and "deletion_curve" not in page  # recovery alone draws no figure
    out = report_stage(report_cfg, tmp_path / "report")
    report_page = Path(out["html"]).read_text()
    assert set(data_block(report_page)) == {"j0ex0-m0", "j0ex0-m1"} and "niah_mq_q2 (1)" in report_page
