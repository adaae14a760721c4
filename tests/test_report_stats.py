"""Statistics in the run summaries (intervals, paired comparisons) and in the report command's Table-1 layout, on
hand-made records; the table1 experiment lists and builds every Table-1 method."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from helpers.paths import ROOT
from helpers.records import whole_report, without_time_section, write_job_folder
from ctxbench.attribution import Attributor
from ctxbench.stages.conf import register_configs
from ctxbench.core.errors import ConfigError, DataError
from ctxbench.metrics.faithfulness import FaithfulnessScorer, with_deletion_set
from ctxbench.metrics.recovery import RecoveryScorer
from ctxbench.core.part import build_all
from ctxbench.reporting.aggregate import table1, table_view, write_table1
from ctxbench.jobs.results import find_jobs
from ctxbench.reporting.html import write_report_html
from ctxbench.metrics.stats import StatsSettings, bootstrap_ci
from ctxbench.metrics.summary import compare, summarize
from ctxbench.reporting.tables import markdown_summary
from ctxbench.reporting.tables import write_job_summary

VIEWS = ["seq", "row"]
SCORERS = {"faithfulness": FaithfulnessScorer(), "recovery": RecoveryScorer(fraction=0.1)}
STATS = StatsSettings(n_resamples=200, level=0.95, seed=3, min_n=1)  # 8 examples: intervals and tests drawn

# RISE per example (lower is better): "good" beats "flat" by 0.2 on every example; "mixed" is good on some only.
RISE = {"good": [0.10, 0.20, 0.30, 0.15, 0.25, 0.05, 0.35, 0.12],
        "flat": [0.30, 0.40, 0.50, 0.35, 0.45, 0.25, 0.55, 0.32],
        "mixed": [0.05, 0.60, 0.10, 0.50, 0.20, 0.30, 0.40, None]}
RECALL = {"good": [1.0, 0.5, 1.0, 1.0, 0.5, 1.0, 1.0, 0.5], "flat": [0.0] * 8, "mixed": [0.5] * 8}


def records(methods=("good", "flat", "mixed")):
    out = []
    for m in methods:
        for i, rise in enumerate(RISE[m]):
            faith = None if rise is None else {
                v: {"RISE": rise, "MAS": rise + 0.1, "RISE+AP": rise + 0.2, "curve": [0.0, -1.0], "density": [1, 0]}
                for v in VIEWS}
            out.append({"example_id": f"ex{i}", "method": m, "attribution_s": 0.5, "faithfulness": faith,
                        "recovery": {v: RECALL[m][i] for v in VIEWS}, "recovery_skipped": None})
    return out


def test_summary_intervals_are_the_bootstrap_of_each_metric():
    s = summarize(records(), SCORERS, VIEWS, STATS)
    cell = s["good"]["faithfulness"]["seq"]["RISE"]
    assert cell["mean"] == pytest.approx(sum(RISE["good"]) / 8) and cell["n"] == 8
    assert (cell["ci_low"], cell["ci_high"]) == bootstrap_ci(RISE["good"], n_resamples=200, seed=3)
    assert min(RISE["good"]) <= cell["ci_low"] < cell["mean"] < cell["ci_high"] <= max(RISE["good"])
    assert s["mixed"]["faithfulness"]["seq"]["RISE"]["n"] == 7  # the unscored example is left out
    # a constant metric has a zero-width interval
    assert s["flat"]["recovery"]["row"]["recall"] == {"mean": 0.0, "std": 0.0, "n": 8, "ci_low": 0.0, "ci_high": 0.0}
    # without settings the summary keeps its old figures only
    assert set(summarize(records(), SCORERS, VIEWS)["good"]["recovery"]["seq"]["recall"]) == {"mean", "std", "n"}


def test_comparisons_all_pairs_or_against_a_baseline():
    rows = compare(records(), SCORERS, VIEWS, STATS)
    # 3 pairs x (3 faithfulness + 1 recovery metrics) x 2 views: these records name no deletion set, so they have
    # no figure under a common set, and a metric without a figure is not compared
    assert len(rows) == 3 * 4 * 2
    assert {(r["a"], r["b"]) for r in rows} == {("good", "flat"), ("good", "mixed"), ("flat", "mixed")}
    gf = next(r for r in rows if (r["a"], r["b"], r["metric"], r["view"]) == ("good", "flat", "RISE", "seq"))
    # every difference is -0.2: the interval is the point, and all 8 signs agree (exact p = 2 / 2^8)
    assert gf["n"] == 8 and gf["diff"] == pytest.approx(-0.2)
    assert gf["ci_low"] == pytest.approx(-0.2) and gf["ci_high"] == pytest.approx(-0.2)
    assert gf["p_value"] == pytest.approx(2 / 256) and gf["better"] == "a" and gf["significant"]
    rec = next(r for r in rows if (r["a"], r["b"], r["metric"], r["view"]) == ("good", "flat", "recall", "seq"))
    assert rec["diff"] == pytest.approx(6.5 / 8) and rec["better"] == "a"  # higher recall is better
    gm = next(r for r in rows if (r["a"], r["b"], r["metric"], r["view"]) == ("good", "mixed", "RISE", "seq"))
    assert gm["n"] == 7  # ex7 was not scored for "mixed"
    by_hand = [g - m for g, m in zip(RISE["good"][:7], RISE["mixed"][:7])]
    assert gm["diff"] == pytest.approx(sum(by_hand) / 7)
    base = compare(records(), SCORERS, VIEWS, StatsSettings(n_resamples=50, baseline="flat"))
    assert {(r["a"], r["b"]) for r in base} == {("good", "flat"), ("mixed", "flat")}
    with pytest.raises(ConfigError, match=r"stats.baseline: .nope. .*stats.baseline=null"):
        compare(records(), SCORERS, VIEWS, StatsSettings(baseline="nope"))


def test_bad_stats_settings_name_the_key():
    with pytest.raises(ConfigError, match="stats.level"):
        StatsSettings(level=95)
    with pytest.raises(ConfigError, match="stats.n_resamples"):
        StatsSettings(n_resamples=0)


def write_job(tmp_path: Path, name: str, recs: list[dict], views=VIEWS, methods=tuple(RISE), overrides=(),
              **write_kw) -> Path:
    job = tmp_path / name
    config = {"dataset": {"name": name.split("_", 1)[1]}, "model": {"name": "m"}, "views": views, "seed": 3,
              "mode": {"faithfulness": {"_target_": "ctxbench.metrics.faithfulness.FaithfulnessScorer"},
                       "recovery": {"_target_": "ctxbench.metrics.recovery.RecoveryScorer", "fraction": 0.1}},
              "attribution": {m: {} for m in methods}, "stats": asdict(STATS), "paths": {"root": str(job)}}
    write_job_folder(job, config, (f"dataset={config['dataset']['name']}", *overrides), records=recs)
    write_job_summary(job, list(methods), SCORERS, views, title="t", stats=STATS, **write_kw)
    return job


def test_run_summary_files_carry_intervals_and_comparisons(tmp_path, capsys):
    job = write_job(tmp_path, "0_niah_mq_q2", records())
    summary = json.loads((job / "summary.json").read_text())
    assert summary["stats"] == {"n_resamples": 200, "level": 0.95, "seed": 3, "baseline": None, "min_n": 1}
    cell = summary["methods"]["good"]["faithfulness"]["seq"]["RISE"]
    assert {"mean", "std", "n", "ci_low", "ci_high"} == set(cell)
    assert len(summary["comparisons"]) == 24
    md = (job / "summary.md").read_text()
    good = summary["methods"]["good"]["faithfulness"]["seq"]["RISE"]
    assert f"| good | {good['mean']:.3f} [{good['ci_low']:.3f}, {good['ci_high']:.3f}] |" in md
    assert "## Paired comparisons" in md
    assert "| good | flat | Seq | 8 | **-0.200 [-0.200, -0.200], p=0.0078** (good better) |" in md
    # the FlashTrace-layout CSV is unchanged: means, then the std rows
    csv_rows = (job / "faithfulness" / "good.csv").read_text().splitlines()
    assert csv_rows[0] == "Method,RISE,MAS,RISE+AP" and csv_rows[1].startswith("Seq Attr Scores Mean,")


def test_report_table1_layout_with_intervals(tmp_path):
    root = tmp_path / "multirun"
    write_job(root, "0_niah_mq_q2", records())
    write_job(root, "1_vt_h2_c3", records(("good", "flat")))
    jobs = find_jobs([root])
    _, _, _, cells = table1(jobs, "seq", STATS)
    # recomputed from results.jsonl with the report's settings: the same bootstrap over the same values
    assert tuple(cells[("niah_mq_q2", "good")]["stats"]["RISE"][k] for k in ("ci_low", "ci_high")) == \
        tuple(bootstrap_ci(RISE["good"], n_resamples=200, seed=3))
    md_path, csv_path, md = written = write_table1(jobs, tmp_path / "report", "seq", STATS)
    md = whole_report(written)
    lines = md.splitlines()
    # the headline: every row under the common set (these methods' own set is `all`: their main figures), each
    # row's n; the paper's mixed protocol in pairs.md
    assert "### niah_mq_q2 (8 examples)" in lines
    assert "| method | n | RISE@all ↓ | MAS@all ↓ | Recall@10% ↑ |" in lines
    assert "| task (N) | method | n | RISE ↓ | MAS ↓ | RISE+AP ↓ | RISE@all ↓ | MAS@all ↓ | Recall@10% ↑ |" in lines
    g = cells[("niah_mq_q2", "good")]["stats"]
    assert g["RISE@all"] == g["RISE"]
    rows = [line for line in lines if line.startswith("| niah_mq_q2 (8) |") or line.startswith("|  | ")]
    assert rows[0].startswith(f"| niah_mq_q2 (8) | good | 8 | **{g['RISE']['mean']:.3f} [{g['RISE']['ci_low']:.3f}, "
                              f"{g['RISE']['ci_high']:.3f}]** |")
    assert [r.split(" | ")[1] for r in rows[:3]] == ["good", "flat", "mixed"]
    assert "| vt_h2_c3 (8) | good | 8 |" in md and "### vt_h2_c3" in md
    # one comparison row per pair and task, its cells as in the run summary
    assert "| good | flat | 8 | **-0.200 [-0.200, -0.200], p=0.0078** (good better) |" in md
    saved = json.loads((tmp_path / "report" / "table1.json").read_text())
    assert len(saved["comparisons"]) == 3 * 6 + 1 * 6 and saved["stats"]["n_resamples"] == 200
    assert csv_path.read_text().splitlines()[0].startswith("dataset,n,good/RISE,good/MAS")


def test_report_pairs_methods_split_between_runs(tmp_path):
    """Table 1 on a CPU runs IG in a sweep of its own: the report joins the folders task by task, and its comparisons
    pair the methods of both by example, as for one run holding them all."""
    split = find_jobs([
        write_job(tmp_path / "faith", "0_niah_mq_q2", records(("good", "flat")), methods=("good", "flat"),
                  overrides=["attribution=[good,flat]"]),
        write_job(tmp_path / "ig", "0_niah_mq_q2", records(("mixed",)), methods=("mixed",),
                  overrides=["attribution=[mixed]", "stats.baseline=null"])])
    whole = find_jobs([write_job(tmp_path / "one", "0_niah_mq_q2", records())])
    md = whole_report(write_table1(split, tmp_path / "split", "seq", STATS))
    # the same page, but for the time section, which names each run's folder
    assert without_time_section(md) == without_time_section(whole_report(write_table1(whole, tmp_path / "whole", "seq",
                                                                                     STATS)))
    assert "| niah_mq_q2 | ig | mixed | 8 |" in md
    rows = json.loads((tmp_path / "split" / "table1.json").read_text())["comparisons"]
    gm = next(r for r in rows if (r["a"], r["b"], r["metric"]) == ("good", "mixed", "RISE"))
    assert gm["n"] == 7 and gm["diff"] == pytest.approx(sum(g - m for g, m in zip(RISE["good"], RISE["mixed"][:7])) / 7)


def test_report_reads_an_unfinished_run_only_when_asked(tmp_path, caplog):
    root = tmp_path / "multirun"
    write_job(root, "0_niah_mq_q2", records())
    # a run stopped in its last example, before "flat" scored it: results so far, no summary.json
    # (lines as today's scorer writes them, naming each method's own deletion set)
    partial = [with_deletion_set(r, "all") for r in records() if (r["method"], r["example_id"]) != ("flat", "ex7")]
    stopped = write_job(root, "1_vt_h2_c3", partial)
    written = json.loads((stopped / "summary.json").read_text())  # what the run writes for these results
    (stopped / "summary.json").unlink()
    manifest = json.loads((stopped / "manifest.json").read_text())
    (stopped / "manifest.json").write_text(json.dumps({**manifest, "dataset": {"examples": 8}}))
    nxt = json.dumps(dict(records()[0], method="flat", example_id="ex7")) + "\n"
    with open(stopped / "results.jsonl", "a") as fp:  # the running job is half-way through writing its next line
        fp.write(nxt[:40])

    with caplog.at_level("WARNING"):
        jobs = find_jobs([root])
    assert [j.dataset for j in jobs] == ["niah_mq_q2"]
    assert "left out, unfinished" in caplog.text and str(stopped) in caplog.text
    with pytest.raises(DataError, match="unfinished=true"):
        find_jobs([stopped])

    jobs = find_jobs([root], unfinished=True)
    late = jobs[1]
    assert late.unfinished == (7, 8) and jobs[0].unfinished is None
    with open(stopped / "results.jsonl", "a") as fp:  # the job finishes the line: the report keeps what it read
        fp.write(nxt[40:])
    assert len(late.records()) == len(partial)
    # summarised from its results exactly as the run would have (figures, intervals, comparisons)
    assert json.loads(json.dumps(late.summary)) == written
    assert late.summary["methods"]["flat"]["examples"] == 7
    md = whole_report(write_table1(jobs, tmp_path / "report", "seq", STATS))
    assert f"- `{stopped}`: 7 of 8 examples scored by every method so far" in md
    assert "| vt_h2_c3 (8) | good | 8 |" in md and "|  | flat | 7 |" in md
    saved = json.loads((tmp_path / "report" / "table1.json").read_text())
    assert saved["unfinished"] == [{"run": str(stopped), "examples": 7, "planned": 8}]
    page = write_report_html(jobs, table1(jobs, "seq", STATS), tmp_path / "report", 0).read_text()
    assert "(unfinished: 7 of 8 examples scored by every method so far)</summary>" in page
    assert "unfinished" not in write_table1(jobs[:1], tmp_path / "one", "seq", STATS)[2]


def test_a_finished_folder_resumed_with_more_methods_is_unfinished_until_it_ends(tmp_path):
    """A lane that adds methods to a finished folder (the LDS lane's expensive three) rewrites its manifest; the
    summary.json of the earlier run names only the methods it had, so until the new run writes its own the job is
    unfinished and summarised from its results, the new method's examples so far among them."""
    job = write_job(tmp_path, "0_niah_mq_q2", records(("good", "flat")), methods=("good", "flat"))
    manifest = json.loads((job / "manifest.json").read_text())
    manifest["config"]["attribution"]["mixed"] = {}
    (job / "manifest.json").write_text(json.dumps({**manifest, "dataset": {"examples": 8}}))
    with open(job / "results.jsonl", "a") as fp:
        fp.writelines(json.dumps(r) + "\n" for r in records(("mixed",))[:3])
    with pytest.raises(DataError, match="unfinished=true"):
        find_jobs([job])
    (got,) = find_jobs([job], unfinished=True)
    assert got.summary["methods"]["mixed"]["examples"] == 3 and got.unfinished == (3, 8)
    assert got.summary["methods"]["good"]["examples"] == 8


def test_report_view_follows_what_the_runs_scored(tmp_path):
    both = find_jobs([write_job(tmp_path, "0_niah_mq_q2", records())])  # seq and row
    row = find_jobs([write_job(tmp_path, "1_vt_h2_c3", records(), views=["row"])])  # Table 1: row only
    assert table_view(both) == "seq" and table_view(both, "row") == "row"
    assert table_view(row) == "row" and table_view(both + row) == "row"
    with pytest.raises(ConfigError, match="view: .*1_vt_h2_c3 scored the views row, not 'seq'"):
        table_view(both + row, "seq")
    rec = find_jobs([write_job(tmp_path, "2_vt_h4_c1", records(), views=["rec"])])
    with pytest.raises(ConfigError, match=r"view: the runs share no single view to report \(none\)"):
        table_view(row + rec)
    # the table is filled from the row view's figures
    md = whole_report(write_table1(row, tmp_path / "report", table_view(row), STATS))
    assert md.startswith("Table 1 (row view;")


def _compose(overrides):
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="run", overrides=overrides)


def test_table1_experiment_lists_and_builds_every_method():
    cfg = _compose(["+experiment=table1", "dataset=niah_mq_q2", "seed=5"])
    # the FlashTrace paper's Table 1: FlashTrace and its multi-hop variants, per-token IFR, attention, IG, AttnLRP,
    # perturbation, then the controls
    assert list(cfg.attribution) == ["ifr_multi_hop_both", "ifr_multi_hop", "ft_attnlrp", "ifr_all_positions",
                                     "attention", "integrated_gradients", "attnlrp", "perturbation", "copy_match",
                                     "position", "random", "length"]
    assert set(cfg.attribution) == {p.stem for p in (ROOT / "conf" / "attribution").glob("*.yaml")} - {
        "context_cite", "ifr_span", "input_x_gradient"}
    methods = build_all(cfg.attribution, "attribution", Attributor)
    assert all(isinstance(m, Attributor) for m in methods.values())
    assert list(cfg.mode) == ["faithfulness", "recovery"] and cfg.length == 1024 and list(cfg.views) == ["row"]
    stats = OmegaConf.to_object(cfg.stats)
    assert (stats.baseline, stats.seed, stats.n_resamples) == ("ifr_multi_hop_both", 5, 1000)


def test_markdown_without_intervals_keeps_mean_and_std():
    s = summarize(records(("good",)), SCORERS, VIEWS)
    # population std of the eight RISE values: sqrt(0.0756 / 8) = 0.097
    assert "| good | 0.190 ± 0.097 |" in markdown_summary(s, {"faithfulness": SCORERS["faithfulness"].describe()},
                                                          VIEWS, "t")
