"""run_exp end to end on the real SmolLM2 and a generated niah task: figures, files, resume, stale-config refusal."""

import csv
import json

import pytest

from ctxbench.core.errors import DataError
from ctxbench.stages.run import RESULTS, run_stage

from helpers.configs import plugin_option, run_cfg
from helpers.records import whole_report


@pytest.mark.slow
def test_ifr_beats_random_end_to_end(tmp_path, capsys):
    out = tmp_path / "job"
    # 10 deletion steps instead of 20, and the seq view alone (the figures below): a quarter of the forward passes,
    # which are 85% of this test's time (the row view's files: test_tracking's run)
    cfg = run_cfg(tmp_path, "dataset.num_samples=4", "attribution=[ifr_multi_hop,ifr_multi_hop_both,random]",
                  "views=[seq]", "heatmaps=1", "save_traces=true", "mode.faithfulness.steps=10")
    summary = run_stage(cfg, out)
    figures = {m: (s["faithfulness"]["seq"]["RISE"]["mean"], s["faithfulness"]["seq"]["MAS"]["mean"],
                   s["recovery"]["seq"]["recall"]["mean"]) for m, s in summary.items()}
    print("\nRISE / MAS / Recall@10% (seq view, 4 examples of niah_mq_q2 at 512 tokens):")
    for m, f in figures.items():
        print(f"  {m:20s} {f[0]:.3f} {f[1]:.3f} {f[2]:.3f}")
    for m in ("ifr_multi_hop", "ifr_multi_hop_both"):
        assert figures[m][0] < figures["random"][0], "IFR should delete the evidence first (lower RISE)"
        assert figures[m][2] > figures["random"][2], "IFR should recover the needles better than chance"
        assert summary[m]["recovery"]["seq"]["recall"]["n"] == 4 and summary[m]["examples"] == 4
    # Files: per-example lines, FlashTrace-layout CSVs, Markdown, plots, heat map, traces.
    lines = (out / RESULTS).read_text().splitlines()
    assert len(lines) == 12
    rec = json.loads(lines[0])
    assert {"example_id", "method", "faithfulness", "recovery", "attribution_s", "config"} <= set(rec)
    assert len(rec["faithfulness"]["seq"]["curve"]) == 11  # K + 1 points: the override reached the scorer
    # the cost ledger: FlashTrace's capture is forward passes only; the deletion passes are the scoring's; the
    # random control runs no pass
    by_method = {r["method"]: r for r in map(json.loads, lines[:3])}
    assert by_method["ifr_multi_hop"]["cost"]["forward_sequences"] >= 1
    assert by_method["ifr_multi_hop"]["cost"]["backward"] == 0
    assert by_method["random"]["cost"]["forward_sequences"] == 0
    # at most K + 1 = 11 deletion inputs; the distinct ones only (the scorer memoises repeated inputs)
    assert 1 <= by_method["random"]["scoring_cost"]["faithfulness"]["forward_sequences"] <= 11
    assert by_method["random"]["scoring_cost"]["recovery"]["forward_sequences"] == 0
    rows = list(csv.reader(open(out / "faithfulness" / "ifr_multi_hop.csv")))
    assert rows[0] == ["Method", "RISE", "MAS", "RISE+AP"] and rows[1][0] == "Seq Attr Scores Mean"
    assert (out / "recovery" / "random.csv").exists() and (out / "summary.md").exists()
    assert (out / "deletion_curve_seq.png").exists() and not (out / "deletion_curve_row.png").exists()
    assert len(list((out / "heatmaps" / "ifr_multi_hop").glob("*.html"))) == 1
    assert len((out / "traces" / "ifr_multi_hop" / "manifest.jsonl").read_text().splitlines()) == 4
    assert "| method | Seq Recall@10% |" in capsys.readouterr().out
    # The job feeds the Table-1 report.
    from ctxbench.reporting.aggregate import write_table1
    from ctxbench.jobs.results import find_jobs

    from ctxbench.metrics.stats import StatsSettings

    written = write_table1(find_jobs([out]), tmp_path / "report", stats=StatsSettings(min_n=1))  # 4 examples
    # the headline under one deletion set (FlashTrace alone under nonstop: that column stays in pairs.md)
    assert "| method | n | RISE@all ↓ | MAS@all ↓ | Recall@10% ↑ |" in written[2]
    assert "### niah_mq_q2 (4 examples)" in written[2]
    table = whole_report(written)
    assert "| task (N) | method | n | RISE ↓ | MAS ↓ | RISE+AP ↓ | RISE@all ↓ | MAS@all ↓ | RISE@nonstop ↓ | " \
           "MAS@nonstop ↓ | Recall@10% ↑ |" in table
    assert "| niah_mq_q2 (4) | ifr_multi_hop | 4 |" in table and "|  | ifr_multi_hop_both | 4 |" in table
    assert "\n### niah_mq_q2\n" in table  # the paired comparisons, recomputed from results.jsonl
    # Rerun in the same dir: nothing recomputed, same summary.
    before = (out / RESULTS).read_bytes()
    again = run_stage(cfg, out)
    assert (out / RESULTS).read_bytes() == before and again == summary
    # Another configuration for a method already there is refused, and nothing is lost.
    with pytest.raises(DataError, match="another configuration"):
        run_stage(run_cfg(tmp_path, "dataset.num_samples=4", "attribution=[ifr_multi_hop,ifr_multi_hop_both,random]",
                          "views=[seq]", "mode.faithfulness.steps=10", "attribution.ifr_multi_hop.hops=2"), out)
    assert (out / RESULTS).read_bytes() == before


@pytest.mark.slow
def test_recovery_refused_without_spans(tmp_path, morehopqa_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "mh.jsonl").write_text(json.dumps(dict(
        prompt="Paris is in France.\nWhere is Paris?", target="It is in France.\nFrance", indices_to_explain=None,
        attr_mask_indices=None, sink_span=None, thinking_span=None, metadata={"id": "q1"})) + "\n")
    cfg = run_cfg(tmp_path, "dataset=morehopqa", "dataset.name=mh", "mode=[faithfulness,recovery]")
    from ctxbench.core.errors import ExampleRefused

    with pytest.raises(ExampleRefused, match="mode recovery needs evidence spans"):
        run_stage(cfg, tmp_path / "job")
    # Faithfulness alone works on a cached example with a target (whole generation as sink).
    summary = run_stage(run_cfg(tmp_path, "dataset=morehopqa", "dataset.name=mh", "mode=faithfulness",
                                "attribution=[ifr_multi_hop]", "views=[seq]"), tmp_path / "job2")
    assert summary["ifr_multi_hop"]["examples"] == 1


@pytest.mark.slow
def test_a_run_stopped_in_an_example_resumes_at_its_next_method(tmp_path):
    """Each method's record is written as soon as it is scored: a run that dies in an example's second method keeps
    the first method's record (and its heat-map data), and the rerun computes the second method alone."""
    flag = tmp_path / "stopped_once"
    search_path = plugin_option(tmp_path, "attribution", "stop_once",
                                f"stop_once:\n  _target_: plugin_attributor.StopOnceAttributor\n  flag: {flag}\n")
    cfg = run_cfg(tmp_path, search_path, "attribution=[random,stop_once]",
                  "mode=[recovery]", "views=[seq]", "dataset.num_samples=1", "max_examples=1", "heatmaps=1")
    out = tmp_path / "job"
    with pytest.raises(RuntimeError, match="stopped in the middle"):
        run_stage(cfg, out)
    first = (out / RESULTS).read_text().splitlines()
    assert [json.loads(line)["method"] for line in first] == ["random"]
    (data_file,) = (out / "heatmap_data").glob("*.json")
    assert set(json.loads(data_file.read_text())["methods"]) == {"random"}
    summary = run_stage(cfg, out)
    lines = (out / RESULTS).read_text().splitlines()
    assert lines[0] == first[0] and [json.loads(line)["method"] for line in lines] == ["random", "stop_once"]
    assert set(json.loads(data_file.read_text())["methods"]) == {"random", "stop_once"}
    assert summary["stop_once"]["examples"] == summary["random"]["examples"] == 1


@pytest.mark.slow
def test_a_mode_from_outside_the_library(tmp_path):
    """A new mode is one module (tests/plugin_scorer.py) and one YAML (here in a search-path folder): the stage,
    the summaries and the report pick it up by its _target_ alone."""
    search_path = plugin_option(tmp_path, "mode", "evidence_mass",
                                "evidence_mass:\n  _target_: plugin_scorer.EvidenceMassScorer\n  scale: 100\n")
    cfg = run_cfg(tmp_path, search_path, "mode=[evidence_mass]",
                  "dataset.num_samples=4", "attribution=[ifr_multi_hop,random]", "views=[seq]", "max_examples=2",
                  "heatmaps=0")
    out = tmp_path / "job"
    summary = run_stage(cfg, out)
    ifr, rnd = (summary[m]["evidence_mass"]["seq"]["mass"]["mean"] for m in ("ifr_multi_hop", "random"))
    assert ifr > rnd > 0  # IFR puts more of its mass on the needles than uniform noise does
    # the per-example values are recomputable from the stored records
    recs = [json.loads(line) for line in (out / RESULTS).read_text().splitlines()]
    assert len(recs) == 4 and all(0 < r["evidence_mass"]["seq"] <= 100 for r in recs)
    md = (out / "summary.md").read_text()
    assert "## Evidence mass (higher is better)" in md
    assert "| method | Seq mass x100 | scored | attribution s/example | total s/example |" in md
    assert list(csv.reader(open(out / "evidence_mass" / "random.csv")))[0] == ["Method", "mass x100"]
    from ctxbench.reporting.aggregate import write_table1
    from ctxbench.jobs.results import find_jobs

    from ctxbench.metrics.stats import StatsSettings

    written = write_table1(find_jobs([out]), tmp_path / "report", stats=StatsSettings(min_n=1))  # 2 examples
    assert "| method | n | mass x100 |" in written[2]  # a mode's own metric heads the task's table
    table = whole_report(written)
    assert "| task (N) | method | n | mass x100 |" in table and "ifr_multi_hop | 2 |" in table


def test_a_second_run_of_a_job_still_loading_is_refused_before_it_changes_the_folder(tmp_path):
    """The first run holds its results file's lock from its start (before its model loads, before any line): a second
    run of the same folder is refused then, with nothing of the folder changed."""
    from ctxbench.utils.locks import hold, let_go

    out = tmp_path / "job"
    out.mkdir()
    first = hold(out / RESULTS)
    try:
        with pytest.raises(DataError, match="another process is writing this job"):
            run_stage(run_cfg(tmp_path, "dataset.num_samples=1", "attribution=[copy_match]", "mode=recovery"), out)
        assert sorted(p.name for p in out.iterdir()) == [f"{RESULTS}.lock"]
    finally:
        let_go(first)


def test_a_resumed_run_says_what_it_resumes_partial_examples_included():
    """After a kill mid-example the rerun skips the methods already written; it says so even when no example is whole
    yet (it used to say nothing then)."""
    from ctxbench.stages.run import resume_line

    assert resume_line(20, 3, [3] * 20) is None  # a fresh run
    assert resume_line(20, 3, [3] * 15) == "resuming: 5 of 20 examples already scored"
    assert resume_line(20, 3, []) == "nothing to do: all 20 examples already scored by every method"
    assert resume_line(20, 3, [1] + [3] * 19) == ("resuming: 0 of 20 examples already scored, and 2 method results "
                                                  "of 1 unfinished example (those methods are not run again)")
    assert resume_line(4, 2, [1, 1]).endswith("and 2 method results of 2 unfinished examples (those methods are not "
                                              "run again)")
