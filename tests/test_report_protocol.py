"""The report's protocol sections (reporting/protocol.py) and the rows it names by setting: a method run with other
settings is a row of its own (Table 1's FlashTrace hops=3 sensitivity row), figures over too few examples are not
filled, the recall budget per definition, the faithfulness orderings by deletion set, and the sampling funnel."""

import json
import re

import pytest

from ctxbench.metrics.faithfulness import FaithfulnessScorer
from ctxbench.metrics.recovery import RecoveryScorer
from ctxbench.reporting.aggregate import table1
from ctxbench.reporting.aggregate import write_table1 as _write_table1
from ctxbench.metrics.stats import StatsSettings
from ctxbench.jobs.results import find_jobs
from ctxbench.reporting.protocol import budget_rows, deletion_set_rows, record_budget
from ctxbench.reporting.results_table import MinExamples
from ctxbench.metrics.summary import summarize

from helpers.records import whole_report, write_job_folder


def write_table1(*args, **kw):
    """The report over these few hand-made examples: intervals and tests drawn from any n (a report's own floor,
    ``stats.min_n``, is tested in test_report_results)."""
    return _write_table1(*args, **{"stats": StatsSettings(min_n=1), **kw})

SCORERS = {"faithfulness": FaithfulnessScorer(common_sets=["all", "nonstop"]), "recovery": RecoveryScorer()}


def faith(own, all_, nonstop):
    """RISE = MAS per set, enough for orderings."""
    return {"row": {"RISE": own, "MAS": own, "RISE+AP": own, "curve": [0.0, -1.0], "density": [1.0, 0.0],
                    "common": {"all": {"RISE": all_, "MAS": all_, "RISE+AP": all_, "curve": [0.0, -1.0]},
                               "nonstop": {"RISE": nonstop, "MAS": nonstop, "RISE+AP": nonstop, "curve": [0.0, -1.0]}}}}


def record(eid, method, own, all_, nonstop, recall=0.5, skipped=False):
    budget = {"ranked": 80 if skipped else 100, "k": 8 if skipped else 10, "gold": 16 if skipped else 20}
    budget.update(k_over_gold=budget["k"] / budget["gold"], ceiling=min(budget["k"], budget["gold"]) / budget["gold"],
                  stop_tokens_skipped=skipped)
    return {"example_id": eid, "method": method, "P": 100, "G": 5, "attribution_s": 1.0,
            "faithfulness": faith(own, all_, nonstop), "recovery": {"row": recall}, "recovery_skipped": None,
            "gold_tokens": 20, "recovery_budget": budget}


def write_job(root, name, records, attribution, overrides=(), modes=("faithfulness", "recovery"), source=None,
              model="smollm2-135m"):
    scorers = {n: SCORERS[n] for n in modes}
    config = {"dataset": {"name": "niah_mq_q2"}, "model": {"name": model}, "attribution": attribution,
              "views": ["row"], "mode": {n: {"_target_": f"{type(s).__module__}.{type(s).__name__}",
                                             **({"common_sets": ["all", "nonstop"]} if n == "faithfulness" else {})}
                                         for n, s in scorers.items()}}
    summary = {"methods": summarize(records, scorers, ["row"]), "views": ["row"],
               "scorers": {n: s.describe() for n, s in scorers.items()}}
    return write_job_folder(root / name, config, overrides, records=records, summary=summary, dataset=source or {})


# FlashTrace best under its own (mixed) set, last under "all"; IFR and attention swap under "nonstop"
RECS = [r for e in "abc" for r in (record(e, "ifr_multi_hop_both", 0.1, 0.9, 0.1, skipped=True),
                                    record(e, "ifr_all_positions", 0.5, 0.5, 0.3),
                                    record(e, "attention", 0.6, 0.6, 0.2))]


def test_a_method_with_other_settings_is_its_own_row(tmp_path):
    attribution = {m: {"_target_": "x", "hops": 1} for m in ("ifr_multi_hop_both", "ifr_all_positions", "attention")}
    f = write_job(tmp_path, "f", RECS, attribution)
    k3 = [dict(r, recovery={"row": 0.25}) for r in RECS if r["method"] == "ifr_multi_hop_both"]
    for r in k3:
        del r["faithfulness"]
    r3 = write_job(tmp_path, "r3", k3, {"ifr_multi_hop_both": {"_target_": "x", "hops": 3}},
                   overrides=["mode=recovery", "attribution.ifr_multi_hop_both.hops=3"], modes=("recovery",))
    jobs = find_jobs([f, r3])  # no prefer_later needed: not a repeat
    datasets, methods, metrics, cells = table1(jobs, view="row")
    assert methods == ["ifr_multi_hop_both", "ifr_all_positions", "attention", "ifr_multi_hop_both (hops=3)"]
    assert cells[("niah_mq_q2", "ifr_multi_hop_both")]["Recall@10%"] == pytest.approx(0.5)  # the hops=1 figure
    assert cells[("niah_mq_q2", "ifr_multi_hop_both (hops=3)")]["Recall@10%"] == pytest.approx(0.25)
    assert {r["method"] for r in jobs[1].records()} == {"ifr_multi_hop_both (hops=3)"}
    md = whole_report(write_table1(jobs, tmp_path / "out", view="row", caption="evidence CoT (labelled synthetic)",
                                   min_examples=4))
    assert md.startswith("**evidence CoT (labelled synthetic)**")
    assert "|  | ifr_multi_hop_both (hops=3) | 3 | – | – | – | – | – | – | – | too few (3) |" in md
    assert "**too few" not in md  # a figure not shown is never marked the best
    saved = json.loads((tmp_path / "out" / "table1.json").read_text())
    assert saved["caption"] == "evidence CoT (labelled synthetic)" and saved["min_examples"] == 4


def test_deletion_set_orderings_and_budget(tmp_path):
    attribution = {m: {"_target_": "x"} for m in ("ifr_multi_hop_both", "ifr_all_positions", "attention")}
    jobs = find_jobs([write_job(tmp_path, "f", RECS, attribution)])
    datasets, methods, metrics, cells = table1(jobs, view="row")
    paper = {("niah_mq_q2", "ifr_multi_hop_both"): {"RISE": 0.07, "MAS": 0.16},
             ("niah_mq_q2", "ifr_all_positions"): {"RISE": 0.08, "MAS": 0.14}}
    rows = deletion_set_rows(datasets, methods, cells, [], paper)
    rise = next(r for r in rows if r["metric"] == "RISE")
    assert rise["orders"] == {"mixed": "ifr_multi_hop_both, ifr_all_positions, attention",
                              "all": "ifr_all_positions, attention, ifr_multi_hop_both",
                              "nonstop": "ifr_multi_hop_both, attention, ifr_all_positions"}
    assert rise["paper"] == "ifr_multi_hop_both, ifr_all_positions"
    flips = {(f["set"], f["better"], f["worse"]) for f in rise["flips"]}
    assert flips == {("all", "ifr_all_positions", "ifr_multi_hop_both"), ("all", "attention", "ifr_multi_hop_both"),
                     ("nonstop", "attention", "ifr_all_positions")}
    budgets = budget_rows({"niah_mq_q2": [r for j in jobs for r in j.records()]})
    assert [(b["stop_tokens_skipped"], b["k"], b["gold"], b["ceiling"]) for b in budgets] == [
        (False, 10, 20, 0.5), (True, 8, 16, 0.5)]
    md = whole_report(write_table1(jobs, tmp_path / "out", view="row"))
    assert "## Faithfulness by deletion set" in md and "## Recall budget" in md


def test_a_figure_under_its_minimum_is_ranked_in_no_ordering(tmp_path):
    # perturbation scored 2 examples (the others 3), under the report's minimum of 3: the table says "too few (2)",
    # so neither the orderings by deletion set nor the order against the paper may name it
    perturbation = [record(e, "perturbation", 0.01, 0.01, 0.01) for e in "ab"]
    attribution = {m: {"_target_": "x"} for m in ("ifr_multi_hop_both", "ifr_all_positions", "attention",
                                                   "perturbation")}
    jobs = find_jobs([write_job(tmp_path, "f", RECS + perturbation, attribution)])
    write_table1(jobs, tmp_path / "out", view="row", paper=True, min_examples=3)
    saved = json.loads((tmp_path / "out" / "table1.json").read_text())
    orders = [o for r in saved["deletion_sets"] for o in r["orders"].values()] + \
             [r[k] for r in saved["paper_ordering"] for k in ("here", "paper")]
    assert saved["deletion_sets"] and saved["paper_ordering"]
    assert saved["deletion_sets"][0]["orders"]["mixed"] == "ifr_multi_hop_both, ifr_all_positions, attention"
    assert not any("perturbation" in o for o in orders)
    # with a minimum it meets (its own: 2) it is ranked first: the best figures of the task
    write_table1(jobs, tmp_path / "out2", view="row", paper=True, min_examples=MinExamples(3, {"perturbation": 2}))
    saved = json.loads((tmp_path / "out2" / "table1.json").read_text())
    assert all(r["orders"]["mixed"].startswith("perturbation") for r in saved["deletion_sets"])
    assert any(r["here"].startswith("perturbation") for r in saved["paper_ordering"])


def test_budget_of_records_written_before_it_was_kept():
    # P = 891 prompt tokens, 45 gold: k = ceil(89.1) = 90, all tokens ranked
    b = record_budget({"P": 891, "gold_tokens": 45, "recovery": {"row": 0.6}})
    assert (b["k"], b["gold"], b["stop_tokens_skipped"]) == (90, 45, False) and b["ceiling"] == 1.0
    assert record_budget({"P": 891, "gold_tokens": 0, "recovery": None}) is None


def test_funnel_of_a_sampled_cache(tmp_path):
    from ctxbench.reporting.protocol import source_rows
    from types import SimpleNamespace

    cache = tmp_path / "niah_mq_q2.jsonl"
    cache.write_text("")
    log = [{"id": "0", "status": "kept"}, {"id": "1", "status": "judged_wrong"},
           {"id": "2", "status": "malformed", "reason": "no_box"}, {"id": "3", "status": "generation_error"}]
    (tmp_path / "niah_mq_q2.jsonl.log.jsonl").write_text("".join(json.dumps(x) + "\n" for x in log))
    # the record holds the generator's settings(), whose _target_ names its class
    record = {"generator": {"_target_": "ctxbench.generators.hf.HFGenerator"}}
    (tmp_path / "niah_mq_q2.jsonl.config.json").write_text(json.dumps(record))
    job = SimpleNamespace(dataset="niah_mq_q2", source={"kind": "cache", "path": str(cache)})
    row = source_rows([job])[0]
    assert row["generator"] == "hf" and row["funnel"]["processed"] == 4 and row["funnel"]["kept"] == 1
    assert row["accuracy"] == pytest.approx(1 / 3)  # judged correct 1 of 3 generated


def test_time_per_stage(tmp_path):
    """The sampling stage's wall time from its log (rows written before it was recorded count as untimed), and per
    run and method the mean seconds per example, attribution alone and with its scoring."""
    from types import SimpleNamespace

    from ctxbench.reporting.protocol import attribution_time_table, sampling_time_table, source_rows, time_rows
    from ctxbench.reporting.render import markdown

    cache = tmp_path / "samples" / "niah_mq_q2.jsonl"
    cache.parent.mkdir()
    cache.write_text("")
    log = [{"id": "0", "status": "kept", "seconds": 2.5}, {"id": "1", "status": "judged_wrong", "seconds": 1.5},
           {"id": "2", "status": "kept"}, {"done": True}]
    (tmp_path / "samples" / "niah_mq_q2.jsonl.log.jsonl").write_text("".join(json.dumps(x) + "\n" for x in log))
    sources = source_rows([SimpleNamespace(dataset="niah_mq_q2", source={"kind": "cache", "path": str(cache)})])
    assert (sources[0]["funnel"]["seconds"], sources[0]["funnel"]["timed_rows"]) == (4.0, 2)

    timed = [dict(r, attribution_s=a, scoring_timings={"faithfulness": 3.0, "recovery": 0.5})
             for r, a in zip([r for r in RECS if r["method"] == "attention"], (1.0, 2.0, 4.5))]
    attribution = {"attention": {"_target_": "x"}}
    jobs = find_jobs([write_job(tmp_path / "lanes" / "faith_rec", "dataset=niah_mq_q2", timed, attribution)])
    rows = time_rows(jobs)
    assert rows == [{"dataset": "niah_mq_q2", "run": "faith_rec", "method": "attention", "examples": 3,
                     "attribution_s": pytest.approx(2.5), "total_s": pytest.approx(6.0),
                     "total_median_s": pytest.approx(5.5)}]
    md = "\n".join(markdown(sampling_time_table(sources)) + markdown(attribution_time_table(rows)))
    # 4.0 s over the 2 timed of 3 rows tried; 2 kept: 2.0 s each
    assert "| niah_mq_q2 | 3 (2) | 4 | 2.0 | 2.0 |" in md
    assert "| niah_mq_q2 | faith_rec | attention | 3 | 2.5 | 6.0 | 5.5 |" in md
    _, _, table = write_table1(jobs, tmp_path / "report", view="row")
    assert "## Time per stage" in table and "Sampling stage" not in table  # no sampled cache among these runs
    assert json.loads((tmp_path / "report" / "table1.json").read_text())["time"][0]["total_s"] == pytest.approx(6.0)


def test_the_cost_ledger_table(tmp_path):
    """Per run and method: forward sequences, backward passes and scoring sequences as median [min, max] over the
    lines that carry a ledger (older lines have none and are left out), and the median peak memory added."""
    from ctxbench.reporting.protocol import cost_rows

    costs = [(10, 0, 2.0), (14, 0, 4.0), (30, 0, 8.0)]
    led = [dict(r, cost={"forward_calls": f, "forward_sequences": f, "backward": b, "peak_mib": p,
                         "peak_kind": "rss_growth"},
                scoring_cost={"faithfulness": {"forward_sequences": 21}, "recovery": {"forward_sequences": 0}})
           for r, (f, b, p) in zip([r for r in RECS if r["method"] == "attention"], costs)]
    old = [r for r in RECS if r["method"] == "ifr_all_positions"]  # written before the ledger
    jobs = find_jobs([write_job(tmp_path / "lanes" / "faith_rec", "dataset=niah_mq_q2", led + old,
                                {"attention": {"_target_": "x"}, "ifr_all_positions": {"_target_": "y"}})])
    rows = cost_rows(jobs)
    assert [(r["method"], r["examples"], r["forward"], r["backward"], r["scoring_forward"], r["peak_mib"])
            for r in rows] == [("attention", 3, (14.0, 10.0, 30.0), (0.0, 0.0, 0.0), (21.0, 21.0, 21.0), 4.0)]
    _, _, table = write_table1(jobs, tmp_path / "report", view="row")
    assert "## Cost ledger" in table
    assert "| niah_mq_q2 | faith_rec | attention | 3 | 14 [10, 30] | 0 [0, 0] | 21 [21, 21] | 4 (rss_growth) |" in table


def test_variants_side_by_side_with_the_paper(tmp_path):
    from omegaconf import OmegaConf

    from ctxbench.stages.report import report_stage

    attribution = {m: {"_target_": "x"} for m in ("ifr_multi_hop_both", "ifr_all_positions", "attention")}
    jobs = find_jobs([write_job(tmp_path, "f", RECS, attribution)])
    write_table1(jobs, tmp_path / "gold", view="row", paper=True, caption="gold continuation, no CoT: raw data")
    write_table1(jobs, tmp_path / "ev", view="row", paper=True, caption="evidence CoT (labelled synthetic)",
                 min_examples=5)
    cfg = OmegaConf.create({"runs": [], "variants": [str(tmp_path / "gold"), str(tmp_path / "ev")]})
    out = report_stage(cfg, tmp_path / "out")
    md = (tmp_path / "out" / "variants.md").read_text()
    assert out == {"variants": str(tmp_path / "out" / "variants.md")}
    assert "| method | paper | gold continuation, no CoT | evidence CoT (labelled synthetic) |" in md
    # the paper's figures (resources/table1/paper.csv), then each variant's; under min_examples: too few
    assert "| ifr_multi_hop_both | 0.068 / 0.163 / 0.483 | 0.100 / 0.100 / 0.500 / – | too few (3) / too few (3) / " \
           "too few (3) / – |" in md  # no LDS scored: "–"
    assert "| attention | – / – / – | 0.600 / 0.600 / 0.500 / – |" in md
    # a minimum of the method's own (IG in the paper's protocol), given to the report stage: its figures with n
    report_stage(OmegaConf.create({"runs": [str(p) for p in {j.path.parent for j in jobs}], "view": "row",
                                   "paper": True, "min_examples": 5, "min_examples_of": {"ifr_multi_hop_both": 3},
                                   "html": False, "stats": {"min_n": 1}}), tmp_path / "own")
    saved = json.loads((tmp_path / "own" / "table1.json").read_text())
    assert (saved["min_examples"], saved["min_examples_of"]) == (5, {"ifr_multi_hop_both": 3})
    page = (tmp_path / "own" / "table1.md").read_text()
    assert "(`ifr_multi_hop_both` from 3 on, shown with its n under 5)" in page
    assert re.search(r"\| ifr_multi_hop_both \| 3 \| [\d.]+ \[[^]]+\] \(n=3\) \|", page), page
    report_stage(OmegaConf.create({"runs": [], "variants": [str(tmp_path / "gold"), str(tmp_path / "own")]}),
                 tmp_path / "out2")
    assert "| ifr_multi_hop_both | 0.068 / 0.163 / 0.483 | 0.100 / 0.100 / 0.500 / – | 0.100 (n=3) / 0.100 (n=3) / " \
           "0.500 (n=3) / – |" in (tmp_path / "out2" / "variants.md").read_text()
    # FlashTrace best and IFR second here on RISE, as in the paper (RISE 0.068 < 0.075): the one pair kept
    assert "RISE 1/1" in md and "all: 0.50, 0.500; non-stop: 0.50, 0.500" in md
    with pytest.raises(ValueError, match="runs: name the run_exp"):
        report_stage(OmegaConf.create({"runs": [], "variants": []}), tmp_path / "none")


def test_families_side_by_side_say_which_orderings_hold(tmp_path):
    from omegaconf import OmegaConf

    from ctxbench.stages.report import report_stage

    attribution = {m: {"_target_": "x"} for m in ("ifr_multi_hop_both", "ifr_all_positions", "attention")}
    # the second family: per-token IFR and attention swap places under the mixed sets; recall the same (ties)
    other = [r for e in "abcdef" for r in (record(e, "ifr_multi_hop_both", 0.1, 0.9, 0.1, skipped=True),
                                           record(e, "attention", 0.5 - 0.01 * "abcdef".index(e), 0.5, 0.3),
                                           record(e, "ifr_all_positions", 0.6, 0.6, 0.2))]
    smol = find_jobs([write_job(tmp_path, "s", RECS, attribution)])
    gemma = find_jobs([write_job(tmp_path, "g", other, attribution, model="gemma3-270m")])
    write_table1(smol, tmp_path / "smol", view="row", caption="evidence CoT (labelled synthetic)")
    write_table1(gemma, tmp_path / "gemma", view="row", caption="evidence CoT (labelled synthetic)")
    assert json.loads((tmp_path / "gemma" / "table1.json").read_text())["models"] == ["gemma3-270m"]
    cfg = OmegaConf.create({"runs": [], "families": [str(tmp_path / "smol"), str(tmp_path / "gemma")]})
    out = report_stage(cfg, tmp_path / "out")
    head = (tmp_path / "out" / "families.md").read_text()
    assert out == {"families": str(tmp_path / "out" / "families.md")}
    assert "| niah_mq_q2 | RISE | 2 of 3 | 0 | 3 |" in head and "[pairs.md](pairs.md)" in head  # the verdicts first
    md = (tmp_path / "out" / "pairs.md").read_text()  # every pair, model by model
    assert "| metric | pair | smollm2-135m | gemma3-270m | across models |" in md
    # FlashTrace first in both (significant in the second, 6 pairs: Wilcoxon p = 0.031; 3 pairs cannot be)
    assert "| RISE | attention vs ifr_multi_hop_both | ifr_multi_hop_both (n=3) | ifr_multi_hop_both* (n=6) | holds |" \
        in md
    assert ("| RISE | attention vs ifr_all_positions | ifr_all_positions (n=3) | attention* (n=6) | reversed "
            "(significant in gemma3-270m) |") in md
    assert "| niah_mq_q2 | RISE | 2 of 3 | 0 | 3 |" not in md  # the summary is families.md's (3: the smaller report's)
    with pytest.raises(ValueError, match="families: .*two or more"):
        report_stage(OmegaConf.create({"runs": [], "families": [str(tmp_path / "smol")]}), tmp_path / "one")


def test_families_name_a_task_one_model_explained_no_example_of():
    """Gemma 3 (a base model) keeps no self-generated CoT: its cot_self report scores no task, and the families page
    says so per task with the funnel instead of coming out empty."""
    from ctxbench.reporting.protocol import families_markdown

    comparison = {"dataset": "niah_mq_q2", "label": "RISE", "a": "attention", "b": "ifr_multi_hop_both",
                  "better": "b", "significant": True, "n": 20}
    smol = {"models": ["smollm2-135m"], "caption": "self CoT", "datasets": ["niah_mq_q2"],
            "sources": [{"dataset": "niah_mq_q2", "funnel": {"processed": 80, "kept": 1}},
                        {"dataset": "vt_h2_c3", "funnel": {"processed": 80, "kept": 0}}],
            "comparisons": [comparison]}
    gemma = {"models": ["gemma3-270m"], "caption": "self CoT", "datasets": [],
             "sources": [{"dataset": "niah_mq_q2", "funnel": {"processed": 20, "kept": 0}},
                         {"dataset": "vt_h2_c3", "funnel": {"processed": 20, "kept": 0}}],
             "comparisons": []}
    md = "".join(families_markdown([("s/report", smol), ("g/report", gemma)]))
    assert ("## niah_mq_q2\n\nNot compared: gemma3-270m explained no example of this task (its sampling stage kept 0 "
            "of the 20 rows it tried).") in md
    assert ("## vt_h2_c3\n\nNot compared: smollm2-135m explained no example of this task (its sampling stage kept 0 "
            "of the 80 rows it tried); gemma3-270m explained no example of this task (its sampling stage kept 0 of the "
            "20 rows it tried).") in md
    assert "| niah_mq_q2 | – | not compared | – | – |" in md and "| vt_h2_c3 | – | not compared | – | – |" in md
    assert "| metric | pair |" not in md
    # both scored the task, but no pair of methods was compared in both: said, not an empty table
    md = "".join(families_markdown([("s/report", smol), ("g/report", {**gemma, "datasets": ["niah_mq_q2"]})]))
    assert "## niah_mq_q2\n\nNot compared: no pair of methods has a paired comparison in every model." in md
    # a task with no source in one report (a run never made there)
    md = "".join(families_markdown([("s/report", smol), ("g/report", {**gemma, "sources": []})]))
    assert "Not compared: gemma3-270m has no run of this task." in md


def test_a_cache_no_run_explained_is_listed_with_its_funnel(tmp_path):
    from types import SimpleNamespace

    from ctxbench.reporting.protocol import source_rows, source_table
    from ctxbench.reporting.render import markdown

    samples = tmp_path / "samples"
    samples.mkdir()
    for task, statuses in (("niah_mv_v2", ["kept", "judged_wrong"]), ("vt_h2_c3", ["malformed", "malformed"])):
        (samples / f"{task}.jsonl").write_text("")
        (samples / f"{task}.jsonl.log.jsonl").write_text(
            "".join(json.dumps({"id": str(i), "status": s, "reason": "no_box"}) + "\n" for i, s in enumerate(statuses)))
    job = SimpleNamespace(dataset="niah_mv_v2", source={"kind": "cache", "path": str(samples / "niah_mv_v2.jsonl")})
    rows = source_rows([job], [samples])
    assert [(r["dataset"], r["explained"], r["funnel"]["kept"]) for r in rows] == [
        ("niah_mv_v2", True, 1), ("vt_h2_c3", False, 0)]
    md = "\n".join(markdown(source_table(rows, 10)))
    assert "| vt_h2_c3 (not explained: 0 kept) | cache: " in md and "| – | 2 | 2 | 0 | 0 | 0 | 0.000 |" in md
    # a report that explained nothing names the model that wrote its caches (the families page's column)
    (samples / "vt_h2_c3.jsonl.config.json").write_text(json.dumps({"model": {"name": "gemma3-270m"}}))
    write_table1([], tmp_path / "report", samples=[samples])
    written = json.loads((tmp_path / "report" / "table1.json").read_text())
    assert written["models"] == ["gemma3-270m"] and written["datasets"] == []


def test_the_caption_heads_the_page_too(tmp_path):
    from ctxbench.reporting.html import write_report_html

    attribution = {m: {"_target_": "x"} for m in ("ifr_multi_hop_both", "ifr_all_positions", "attention")}
    jobs = find_jobs([write_job(tmp_path, "f", RECS, attribution)])
    page = write_report_html(jobs, table1(jobs, view="row"), tmp_path / "out", 0,
                             caption="evidence CoT <labelled synthetic>").read_text()
    assert "<p><b>evidence CoT &lt;labelled synthetic&gt;</b></p>" in page
