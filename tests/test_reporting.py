"""Run summaries, FlashTrace's CSV layout, plots, heat maps, and the multirun Table-1 report."""

import csv
import json

import pytest

from ctxbench.core.errors import DataError
from ctxbench.metrics.coverage import CoverageScorer
from ctxbench.metrics.faithfulness import FaithfulnessScorer
from ctxbench.metrics.recovery import RecoveryScorer
from ctxbench.reporting.aggregate import swept_keys, table1
from ctxbench.reporting.aggregate import write_table1 as _write_table1
from ctxbench.metrics.stats import StatsSettings
from ctxbench.jobs.results import RESULTS, find_jobs
from ctxbench.reporting.curves import deletion_curve_plots
from ctxbench.reporting.plots import heatmap_html
from ctxbench.metrics.summary import example_seconds, summarize
from ctxbench.reporting.tables import markdown_summary, write_mode_csvs

from helpers.records import whole_report, write_job_folder


def write_table1(*args, **kw):
    """The report over these few hand-made examples: intervals and tests drawn from any n (a report's own floor,
    ``stats.min_n``, is tested in test_report_results)."""
    return _write_table1(*args, **{"stats": StatsSettings(min_n=1), **kw})

VIEWS = ["seq", "row", "rec"]
SCORERS = {"faithfulness": FaithfulnessScorer(), "recovery": RecoveryScorer(fraction=0.1)}
DESCRIPTIONS = {name: sc.describe() for name, sc in SCORERS.items()}


def faith(r, m, a):
    return {v: {"RISE": r, "MAS": m, "RISE+AP": a, "curve": [0.0, -1.0, -2.0], "density": [1.0, 0.5, 0.0]}
            for v in VIEWS}


RECORDS = [
    {"example_id": "a", "method": "ifr", "attribution_s": 1.0, "faithfulness": faith(0.1, 0.2, 0.3),
     "recovery": {"seq": 1.0, "row": 0.5, "rec": 0.0}, "recovery_skipped": None},
    {"example_id": "b", "method": "ifr", "attribution_s": 3.0, "faithfulness": faith(0.3, 0.4, 0.5),
     "recovery": None, "recovery_skipped": "no gold"},
    {"example_id": "c", "method": "ifr", "attribution_s": 2.0, "faithfulness": faith(0.2, 0.3, 0.4),
     "recovery": {"seq": 0.0, "row": 0.5, "rec": 1.0}, "recovery_skipped": None},
    {"example_id": "a", "method": "random", "attribution_s": 0.5, "faithfulness": faith(0.5, 0.5, 0.5),
     "recovery": {"seq": 0.25, "row": 0.25, "rec": 0.25}, "recovery_skipped": None},
]


def test_summary_figures():
    s = summarize(RECORDS, SCORERS, VIEWS)
    ifr = s["ifr"]
    assert ifr["examples"] == 3 and ifr["avg_attribution_s"] == pytest.approx(2.0)
    assert ifr["avg_total_s"] == pytest.approx(2.0)  # these records have no scoring timings
    # the real time of a method on an example: its attribution and every scoring step
    assert example_seconds({"attribution_s": 2.0, "scoring_timings": {"faithfulness": 3.0, "recovery": 0.5}}) == 5.5
    # RISE 0.1, 0.3, 0.2: mean 0.2, population std sqrt((0.01 + 0.01 + 0) / 3)
    assert ifr["faithfulness"]["seq"]["RISE"]["mean"] == pytest.approx(0.2)
    assert ifr["faithfulness"]["seq"]["RISE"]["std"] == pytest.approx((0.02 / 3) ** 0.5)
    rec = ifr["recovery"]
    assert rec["seq"]["recall"]["mean"] == pytest.approx(0.5) and rec["rec"]["recall"]["mean"] == pytest.approx(0.5)
    assert rec["seq"]["recall"]["n"] == 2  # one example had no evidence token
    assert s["random"]["recovery"]["row"]["recall"]["std"] == 0.0


def test_reference_csv_layout(tmp_path):
    s = summarize(RECORDS, SCORERS, VIEWS)
    paths = write_mode_csvs(tmp_path, s, SCORERS, VIEWS)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in paths) == [
        "faithfulness/ifr.csv", "faithfulness/random.csv", "recovery/ifr.csv", "recovery/random.csv"]
    rows = list(csv.reader(open(tmp_path / "faithfulness" / "ifr.csv")))
    assert rows[0] == ["Method", "RISE", "MAS", "RISE+AP"]
    assert [r[0] for r in rows[1:]] == ["Seq Attr Scores Mean", "Row Attr Scores Mean", "Recursive Attr Scores Mean",
                                        "Seq Attr Scores Var", "Row Attr Scores Var", "Recursive Attr Scores Var",
                                        "Avg Sample Time (s)"]
    assert [float(x) for x in rows[1][1:]] == pytest.approx([0.2, 0.3, 0.4])
    assert float(rows[7][1]) == pytest.approx(2.0)
    rec = {r[0]: r[1] for r in csv.reader(open(tmp_path / "recovery" / "ifr.csv"))}
    assert rec["Method"] == "Recovery@10%" and float(rec["Seq Attr Recovery Mean"]) == 0.5
    assert rec["Examples Used"] == "2" and rec["Examples Skipped"] == "1"
    md = markdown_summary(s, DESCRIPTIONS, VIEWS, "t")
    assert "## Faithfulness (lower is better)" in md and "## Recovery (higher is better)" in md
    assert ("| Seq Recall@10% | Row Recall@10% | Recursive Recall@10% | scored | attribution s/example "
            "| total s/example |") in md
    assert "| ifr | 0.200 ± 0.082 |" in md
    assert "| random | 0.250 ± 0.000 | 0.250 ± 0.000 | 0.250 ± 0.000 | 1/1 | 0.50 |" in md
    assert "| ifr | 0.500 ± 0.500 | 0.500 ± 0.000 | 0.500 ± 0.500 | 2/3 | 2.00 |" in md


def test_plots_and_heatmap(tmp_path):
    written = deletion_curve_plots(RECORDS, VIEWS, tmp_path)
    assert [p.name for p in written] == ["deletion_curve_seq.png", "deletion_curve_row.png", "deletion_curve_rec.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)
    page = heatmap_html(["The", " key", " <is>"], [0.0, 2.0, 1.0], title="t", gold=[1], generated=[" 4", "2"])
    assert "rgba(220,38,38,1.00)" in page and "rgba(220,38,38,0.50)" in page
    assert "&lt;is&gt;" in page and 'class="tok gold"' in page and " 42" in page
    assert 'title="1: 2"' in page  # the weight on hover


def make_job(root, name, dataset, overrides, summary_methods, modes=tuple(SCORERS), **config_over):
    d = root / name
    config = {"dataset": {"name": dataset, "length": 1024}, "model": {"name": "smollm2-135m"},
              "attribution": {m: {"method": m} for m in summary_methods}, "prompt_format": "table1",
              "max_examples": 8, "paths": {"root": str(d)}}
    config.update(config_over)
    recs = [dict(r, method=m) for m in summary_methods for r in RECORDS if r["method"] == "ifr"]
    summary = {"methods": summarize(recs, {n: SCORERS[n] for n in modes}, VIEWS),
               "scorers": {n: DESCRIPTIONS[n] for n in modes}}
    return write_job_folder(d, config, overrides, summary=summary)


def test_table1_from_a_multirun(tmp_path):
    root = tmp_path / "multirun"
    make_job(root, "0_dataset=niah_mq_q2", "niah_mq_q2", ["dataset=niah_mq_q2"], ["ifr_multi_hop", "random"])
    make_job(root, "1_dataset=vt_h2_c3", "vt_h2_c3", ["dataset=vt_h2_c3"], ["ifr_multi_hop", "random"])
    jobs = find_jobs([root])
    assert swept_keys(jobs) == {"dataset"}
    datasets, methods, metrics, cells = table1(jobs)
    assert datasets == ["niah_mq_q2", "vt_h2_c3"] and methods == ["ifr_multi_hop", "random"]
    assert [(m["label"], m["higher_is_better"]) for m in metrics] == [
        ("RISE", False), ("MAS", False), ("RISE+AP", False), ("RISE@all", False), ("MAS@all", False),
        ("RISE@nonstop", False), ("MAS@nonstop", False), ("Recall@10%", True)]
    assert cells[("vt_h2_c3", "random")]["RISE"] == pytest.approx(0.2)
    assert cells[("vt_h2_c3", "random")]["Recall@10%"] == pytest.approx(0.5)
    md_path, csv_path, md = written = write_table1(jobs, tmp_path / "out")
    md = whole_report(written)
    # the Table-1 layout: a row per task and method, the metric columns (no results.jsonl here: mean ± std)
    # (summaries without a deletion set named: no figure under a common set, so no such column)
    assert "| task (N) | method | n | RISE ↓ | MAS ↓ | RISE+AP ↓ | Recall@10% ↑ |" in md
    assert ("| niah_mq_q2 (3) | ifr_multi_hop | 2/3 | 0.200 ± 0.082 | 0.300 ± 0.082 | 0.400 ± 0.082 "
            "| 0.500 ± 0.500 |") in md
    assert "|  | random (control) | 2/3 | 0.200 ± 0.082 | 0.300 ± 0.082 | 0.400 ± 0.082 | 0.500 ± 0.500 |" in md
    rows = list(csv.reader(open(csv_path)))
    assert rows[0][:4] == ["dataset", "n", "ifr_multi_hop/RISE", "ifr_multi_hop/MAS"]


def test_report_refuses_unswept_differences_and_duplicates(tmp_path):
    a = make_job(tmp_path, "a", "niah_mq_q2", [], ["ifr"])
    b = make_job(tmp_path, "b", "vt_h2_c3", [], ["ifr"], model={"name": "qwen3-8b"})
    with pytest.raises(ValueError, match=r"not swept.*model.name"):
        table1(find_jobs([a, b]))
    c = make_job(tmp_path, "c", "niah_mq_q2", [], ["ifr"])
    with pytest.raises(ValueError, match=r"two runs give ifr on niah_mq_q2 \(RISE\)"):
        table1(find_jobs([a, c]))
    # A swept model is fine (but then the cells collide unless datasets differ).
    d = make_job(tmp_path, "d", "niah_mq_q2", ["model=smollm2-135m"], ["ifr"])
    e = make_job(tmp_path, "e", "vt_h2_c3", ["model=qwen3-8b"], ["ifr"], model={"name": "qwen3-8b"})
    assert len(table1(find_jobs([d, e]))[0]) == 2
    with pytest.raises(DataError, match="no finished run_exp job"):
        find_jobs([tmp_path / "a" / ".hydra"])


def test_report_joins_a_faithfulness_and_a_recovery_sweep(tmp_path):
    """Table 1 takes faithfulness with hops=1 and recovery with hops=3: two sweeps whose rows the report joins."""
    f = make_job(tmp_path, "f", "niah_mq_q2", ["mode=faithfulness"], ["ifr_multi_hop_both"], modes=["faithfulness"])
    r = make_job(tmp_path, "r", "niah_mq_q2", ["mode=recovery", "attribution.ifr_multi_hop_both.hops=3"],
                 ["ifr_multi_hop_both"], modes=["recovery"])
    datasets, methods, metrics, cells = table1(find_jobs([f, r]))
    cell = cells[("niah_mq_q2", "ifr_multi_hop_both")]
    assert methods == ["ifr_multi_hop_both"] and cell["runs_n"] == {3}
    assert cell["RISE"] == pytest.approx(0.2) and cell["Recall@10%"] == pytest.approx(0.5)
    md = whole_report(write_table1(find_jobs([f, r]), tmp_path / "out"))
    assert ("| niah_mq_q2 (3) | ifr_multi_hop_both | 2/3 | 0.200 ± 0.082 | 0.300 ± 0.082 | 0.400 ± 0.082 "
            "| 0.500 ± 0.500 |") in md
    # a recovery run that scored fewer examples: the row's n says both counts; the task's heading one, in words
    short = make_job(tmp_path, "short", "niah_mq_q2", ["mode=recovery", "attribution.ifr_multi_hop_both.hops=3"],
                     ["ifr_multi_hop_both"], modes=["recovery"])
    summary = json.loads((short / "summary.json").read_text())
    summary["methods"]["ifr_multi_hop_both"]["examples"] = 2
    (short / "summary.json").write_text(json.dumps(summary))
    out = write_table1(find_jobs([f, short]), tmp_path / "out_short")
    assert "### niah_mq_q2 (2 examples)" in out[2] and "N=" not in out[2]
    assert "| niah_mq_q2 (3) | ifr_multi_hop_both | 2/3 |" in whole_report(out)
    assert json.loads((tmp_path / "out_short" / "table1.json").read_text())["cells"][0]["n_per_run"] == [2, 3]
    g = make_job(tmp_path, "g", "niah_mq_q2", ["mode=recovery"], ["ifr_multi_hop_both"], modes=["recovery"])
    with pytest.raises(ValueError, match=r"two runs give ifr_multi_hop_both on niah_mq_q2 \(Recall@10%\)"):
        table1(find_jobs([r, g]))


def test_report_takes_a_repeated_scorer_from_the_later_run_when_asked(tmp_path):
    """Table 1's own procedure: the sweep of every method scores FlashTrace's recovery with hops=1 too; the recovery
    sweep with hops=3, listed later, gives the figure with prefer_later=true (refused without it). The earlier run's
    recovery lines no longer count anywhere (cells, intervals, comparisons); its faithfulness stays."""
    f = make_job(tmp_path, "f", "niah_mq_q2", [], ["ifr_multi_hop_both", "random"])  # faithfulness + recovery
    r = make_job(tmp_path, "r", "niah_mq_q2", ["mode=recovery", "attribution.ifr_multi_hop_both.hops=3"],
                 ["ifr_multi_hop_both"], modes=["recovery"])
    summary = json.loads((r / "summary.json").read_text())
    for fig in summary["methods"]["ifr_multi_hop_both"]["recovery"]["seq"].values():
        fig["mean"] = 0.9
    (r / "summary.json").write_text(json.dumps(summary))
    (f / RESULTS).write_text("".join(json.dumps(dict(rec, method="ifr_multi_hop_both")) + "\n"
                                     for rec in RECORDS if rec["method"] == "ifr"))
    with pytest.raises(ValueError,
                       match=r"two runs give ifr_multi_hop_both on niah_mq_q2 \(Recall@10%\).*prefer_later"):
        find_jobs([f, r])
    jobs = find_jobs([f, r], prefer_later=True)
    cells = table1(jobs)[3]
    assert cells[("niah_mq_q2", "ifr_multi_hop_both")]["Recall@10%"] == pytest.approx(0.9)
    assert cells[("niah_mq_q2", "ifr_multi_hop_both")]["RISE"] == pytest.approx(0.2)
    assert cells[("niah_mq_q2", "random")]["Recall@10%"] == pytest.approx(0.5)  # given once: kept
    lines = jobs[0].records()
    assert lines and all(x["recovery"] is None and x["faithfulness"] is not None for x in lines)
    # the order of runs decides: listed the other way round, the hops=1 figure wins, and the recovery run, left with
    # nothing, does not count in N
    summary["methods"]["ifr_multi_hop_both"]["examples"] = 2
    (r / "summary.json").write_text(json.dumps(summary))
    cells = table1(find_jobs([r, f], prefer_later=True))[3]
    assert cells[("niah_mq_q2", "ifr_multi_hop_both")]["Recall@10%"] == pytest.approx(0.5)
    assert cells[("niah_mq_q2", "ifr_multi_hop_both")]["runs_n"] == {3}


def test_coverage_summary_and_csv(tmp_path):
    def cov(x):
        return {v: {"within": x, "above_half": 1.0, "above_mean": x / 2} for v in VIEWS}

    recs = [{"example_id": "a", "method": "m", "attribution_s": 1.0, "coverage": cov(1.0)},
            {"example_id": "b", "method": "m", "attribution_s": 1.0, "coverage": cov(0.0)},
            {"example_id": "c", "method": "m", "attribution_s": 1.0, "coverage": None}]
    scorers = {"coverage": CoverageScorer()}
    s = summarize(recs, scorers, VIEWS)
    assert s["m"]["coverage"]["row"]["within"] == {"mean": 0.5, "std": 0.5, "n": 2}
    write_mode_csvs(tmp_path, s, scorers, VIEWS)
    rows = list(csv.reader(open(tmp_path / "coverage" / "m.csv")))
    assert rows[0] == ["Method", "within", "above_half", "above_mean"]
    assert rows[1] == ["Seq Attr Coverage Mean", "0.5", "1.0", "0.25"] and rows[4][0] == "Seq Attr Coverage Std"
    assert "## Coverage of gold sentences" in markdown_summary(s, {"coverage": scorers["coverage"].describe()},
                                                                VIEWS, "t")


def test_report_cli_writes_table1(tmp_path):
    import subprocess
    import sys

    from helpers.paths import ROOT

    root = tmp_path / "multirun"
    make_job(root, "0_dataset=niah_mq_q2", "niah_mq_q2", ["dataset=niah_mq_q2"], ["ifr_multi_hop_both"])
    make_job(root, "1_dataset=vt_h2_c3", "vt_h2_c3", ["dataset=vt_h2_c3"], ["ifr_multi_hop_both"])
    out = subprocess.run([sys.executable, str(ROOT / "exp" / "exp2" / "report.py"), f"runs=[{root}]",
                          f"hydra.run.dir={tmp_path / 'report'}", "stats.min_n=1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert ("| vt_h2_c3 (3) | ifr_multi_hop_both | 2/3 | 0.200 ± 0.082 | 0.300 ± 0.082 | 0.400 ± 0.082 "
            "| 0.500 ± 0.500 |") in (tmp_path / "report" / "pairs.md").read_text()
    assert "### vt_h2_c3 (2 examples)" in out.stdout  # the page's headline tables, printed
    assert (tmp_path / "report" / "table1.md").exists() and (tmp_path / "report" / "table1.csv").exists()
    # a wrong runs entry: one line naming it, exit code 2, no traceback
    bad = subprocess.run([sys.executable, str(ROOT / "exp" / "exp2" / "report.py"),
                          f"runs=[{root},{tmp_path / 'nope'}]", f"hydra.run.dir={tmp_path / 'report2'}"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1] == f"error: {tmp_path / 'nope'}: no such run or multirun folder"


def test_paper_table1_figures_and_orderings(tmp_path):
    from ctxbench.reporting.paper import load_paper, ordering_rows, ranked

    paper = load_paper()
    # FlashTrace's row is the paper's Table 1 row (RISE, MAS, RISE+AP, Recall@10%)
    assert paper[("niah_mq_q2", "ifr_multi_hop_both")] == {"RISE": 0.068, "MAS": 0.163, "RISE+AP": 0.163,
                                                           "Recall@10%": 0.483}
    assert paper[("vt_h2_c3", "ifr_multi_hop_both")]["Recall@10%"] == 0.698
    assert "Recall@10%" not in paper[("morehopqa", "ifr_multi_hop_both")]
    assert paper[("niah_mv_v2", "ifr_all_positions")] == {"RISE": 0.069, "MAS": 0.134, "Recall@10%": 0.575}
    assert ranked({"a": 0.2, "b": 0.1, "c": 0.2}, higher_is_better=False) == "b, a = c"
    metrics = [{"label": "RISE", "higher_is_better": False}, {"label": "Recall@10%", "higher_is_better": True}]
    # here: IFR beats FlashTrace on RISE (the paper: FlashTrace 0.068 < IFR 0.075 < AttnLRP 0.196); recall as the paper
    cells = {("niah_mq_q2", "ifr_multi_hop_both"): {"RISE": 0.20, "Recall@10%": 0.6},
             ("niah_mq_q2", "ifr_all_positions"): {"RISE": 0.10, "Recall@10%": 0.5},
             ("niah_mq_q2", "attnlrp"): {"RISE": 0.30, "Recall@10%": None},
             ("niah_mq_q2", "random"): {"RISE": 0.05, "Recall@10%": 0.1}}  # not in the paper: left out
    comps = [{"dataset": "niah_mq_q2", "label": "RISE", "a": "ifr_multi_hop_both", "b": "ifr_all_positions",
              "better": "b", "significant": True}]
    rows = ordering_rows(["niah_mq_q2"], list(dict.fromkeys(m for _, m in cells)), metrics, cells, comps, paper)
    assert rows == [
        {"dataset": "niah_mq_q2", "metric": "RISE", "paper": "ifr_multi_hop_both, ifr_all_positions, attnlrp",
         "here": "ifr_all_positions, ifr_multi_hop_both, attnlrp",
         "swapped": [{"paper": "ifr_multi_hop_both", "here": "ifr_all_positions", "significant": True}]},
        {"dataset": "niah_mq_q2", "metric": "Recall@10%", "paper": "ifr_multi_hop_both, ifr_all_positions",
         "here": "ifr_multi_hop_both, ifr_all_positions", "swapped": []}]
    comps[0]["significant"] = False
    assert ordering_rows(["niah_mq_q2"], ["ifr_multi_hop_both", "ifr_all_positions"], metrics[:1], cells, comps,
                         paper)[0]["swapped"][0]["significant"] is False
    assert ordering_rows(["niah_mq_q2"], ["ifr_all_positions", "attnlrp"], metrics[:1], cells, [],
                         paper)[0]["swapped"] == []  # same order as the paper
    # through the report: a section after the comparisons, and in table1.json
    root = tmp_path / "multirun"
    make_job(root, "0_dataset=niah_mq_q2", "niah_mq_q2", ["dataset=niah_mq_q2"], ["ifr_multi_hop_both", "attnlrp"])
    md = whole_report(write_table1(find_jobs([root]), tmp_path / "out", paper=True))
    assert "## Against the paper's Table 1" in md
    assert "| niah_mq_q2 | RISE | ifr_multi_hop_both, attnlrp | ifr_multi_hop_both = attnlrp | none |" in md
    saved = json.loads((tmp_path / "out" / "table1.json").read_text())
    assert saved["paper_ordering"][0]["metric"] == "RISE"
    assert "Against the paper" not in write_table1(find_jobs([root]), tmp_path / "out2")[2]
