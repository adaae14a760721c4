"""scripts/table1.sh: its lanes on one short example per task, for real (SmolLM2), into a temporary folder. The gold
lanes must land in the folders the report joins, resume instead of recomputing, and the report must take FlashTrace's
recall from the hops=1 stop-token lane and show hops=3 as a row of its own; the two-stage evidence-CoT variant runs
the sampling stage, then explains its caches, and its report shows the funnel."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers.cli import run_script
from helpers.paths import CACHE_DIR, ROOT

SCRIPT = ROOT / "scripts" / "table1.sh"
# the gold lanes test runs on niah_single_1: one needle, a short gold answer (the per-token methods, AttnLRP and
# per-token IFR, take a pass per generated token)
GOLD_TASK = "niah_single_1"
JOB = f"dataset={GOLD_TASK},max_examples=1"
SEVEN = ["ifr_multi_hop_both", "ifr_multi_hop", "ft_attnlrp", "ifr_all_positions", "attention", "attnlrp",
         "perturbation"]


def _lane(tmp_path, lane, *overrides, variant="gold", tasks="niah_mq_q2"):
    env = dict(os.environ, TABLE1_DIR=str(tmp_path / "runs"), TABLE1_TASKS=tasks, TABLE1_EXAMPLES="1",
               PYTHON=sys.executable,
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", str(min(4, os.cpu_count() or 1))))
    # the script runs in the project root (paths.root=.): every folder a lane reads or writes is given here
    short = [] if lane in ("report", "overview") else [f"paths.data_dir={tmp_path / 'data'}",
                                                        f"paths.model_cache_dir={CACHE_DIR}"]
    # the gold lanes run at 256 tokens here to save time (perturbation's leave-one-sentence-out passes: 56 s of the
    # faith lane's 108 at 512), on 2 generated rows (rows are made one by one: the first of 500 is the same row); a
    # CoT variant's lanes at the sampling stage's 1,024 (its caches are made at that length) with a samples_dir of
    # its own
    if lane not in ("report", "overview") and variant == "gold":
        short += ["length=256", "dataset.num_samples=2", f"paths.samples_dir={tmp_path / 'samples'}"]
    return subprocess.run(["bash", str(SCRIPT), variant, lane, *short, *overrides], env=env, capture_output=True,
                          text=True, timeout=900)


def _records(tmp_path, lane):
    return [json.loads(line) for line in (tmp_path / "runs" / lane / JOB / "results.jsonl").read_text().splitlines()]


def test_unknown_lane_is_one_line(tmp_path):
    out = _lane(tmp_path, "tables")
    assert out.returncode == 2
    assert out.stderr.strip() == ("error: scripts/table1.sh: unknown lane 'tables' (sample | faith | faith_common | ig "
                                  "| controls | controls_faith | lds | rec | report | compare | overview | families)")


def test_a_cot_lane_without_its_caches_is_refused(tmp_path):
    out = _lane(tmp_path, "faith", variant="cot_self")
    assert out.returncode == 2
    assert out.stderr.strip() == (f"error: scripts/table1.sh: no cache {tmp_path / 'runs'}/cot_self/samples/"
                                  "niah_mq_q2.jsonl: run 'bash scripts/table1.sh cot_self sample' first")


@pytest.mark.slow
def test_lanes_resume_and_join_in_the_report(tmp_path):
    # 2 deletion steps: this test checks where the lanes write and what the report joins, not the curves (a third of
    # the time of the default 20)
    steps = "mode.faithfulness.steps=2"
    ig = ["attribution.integrated_gradients.ig_steps=2", steps]
    lds = ["attribution=[ifr_multi_hop_both,copy_match,context_cite]", "attribution.context_cite.n_ablations=6",
           "mode.lds.n_masks=4"]
    for lane, extra in [("rec", []), ("faith", [steps]), ("faith_common", [steps]), ("ig", ig), ("controls", []),
                        ("controls_faith", [steps]), ("lds", lds)]:
        out = _lane(tmp_path, lane, *extra, tasks=GOLD_TASK)
        assert out.returncode == 0, out.stderr[-3000:]
    rec1, rec, faith, ig = (_records(tmp_path, lane) for lane in ("rec_h1", "rec_h3", "faith_rec", "ig"))
    assert [r["method"] for r in rec] == ["ifr_multi_hop_both"] and set(rec[0]) >= {"recovery"}
    assert "faithfulness" not in rec[0]
    assert rec1[0]["recovery_budget"]["stop_tokens_skipped"] is True
    assert sorted(r["method"] for r in faith) == sorted(SEVEN)
    assert [r["method"] for r in ig] == ["integrated_gradients"]
    # the IG lane kept its partial sums where it was told, and removed each once its example was done
    partial = tmp_path / "runs" / "ig" / "partial"
    assert partial.is_dir() and not list(partial.iterdir())
    assert all(set(r["faithfulness"]) == {"row"} for r in faith + ig)  # Table 1's view only

    # a rerun resumes: nothing is recomputed, nothing is lost
    again = _lane(tmp_path, "rec", tasks=GOLD_TASK)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _records(tmp_path, "rec_h3") == rec

    out = _lane(tmp_path, "report", "stats.min_n=1", tasks=GOLD_TASK)  # one example: intervals from n=1 here
    assert out.returncode == 0, out.stderr[-3000:]
    saved = json.loads((tmp_path / "runs" / "report" / "table1.json").read_text())
    cells = {c["method"]: c for c in saved["cells"] if c["dataset"] == GOLD_TASK}
    assert sorted(cells) == sorted(SEVEN + ["integrated_gradients", "ifr_multi_hop_both (hops=3)", "copy_match",
                                            "position", "random", "length", "context_cite"])
    # FlashTrace's recall is the hops=1 stop-token lane's (prefer_later); hops=3 a row of its own; its faithfulness
    # the faith_common lane's, its own set and both common sets (the gold faith lane scores no common set)
    (flash,) = _records(tmp_path, "faith_common")
    assert flash["method"] == "ifr_multi_hop_both" and set(flash["faithfulness"]["row"]["common"]) == {"all", "nonstop"}
    figures = cells["ifr_multi_hop_both"]["figures"]
    assert figures["Recall@10%"]["mean"] == pytest.approx(rec1[0]["recovery"]["row"])
    assert cells["ifr_multi_hop_both (hops=3)"]["figures"]["Recall@10%"]["mean"] == pytest.approx(
        rec[0]["recovery"]["row"])
    assert figures["RISE"]["mean"] == pytest.approx(flash["faithfulness"]["row"]["RISE"])
    assert figures["RISE@all"]["mean"] == pytest.approx(flash["faithfulness"]["row"]["common"]["all"]["RISE"])
    # every other method's own set is `all`: its RISE@all is its main figure
    attention = next(r for r in faith if r["method"] == "attention")
    assert cells["attention"]["figures"]["RISE@all"]["mean"] == pytest.approx(
        attention["faithfulness"]["row"]["RISE"])
    # the controls' lane gives their recall rows, the LDS lane every method's LDS column
    controls = {r["method"]: r for r in _records(tmp_path, "controls")}
    assert sorted(controls) == ["copy_match", "length", "position", "random"]
    assert "faithfulness" not in controls["random"]
    assert cells["copy_match"]["figures"]["Recall@10%"]["mean"] == pytest.approx(
        controls["copy_match"]["recovery"]["row"])
    faith_controls = {r["method"]: r for r in _records(tmp_path, "controls_faith")}
    assert cells["random"]["figures"]["RISE"]["mean"] == pytest.approx(faith_controls["random"]["faithfulness"]["row"]
                                                                       ["RISE"])
    lds_recs = {r["method"]: r for r in _records(tmp_path, "lds")}
    assert figures["LDS"]["mean"] == pytest.approx(lds_recs["ifr_multi_hop_both"]["lds"]["row"]["lds"])
    # ContextCite's LDS is a held-out fit of the quantity LDS measures: the page says so above its tables
    assert "\nLDS and ContextCite: context_cite fits its sentence weights by regression" in \
        (tmp_path / "runs" / "report" / "table1.md").read_text()
    # the overview renders the report's orders from its table1.json
    out = _lane(tmp_path, "overview")
    assert out.returncode == 0, out.stderr[-3000:]
    page = (tmp_path / "runs" / "overview" / "overview.md").read_text()
    assert "`" + str(tmp_path / "runs" / "report") + "`" in page and "| Recall@10% | " in page


@pytest.mark.slow
def test_the_two_stage_evidence_cot_variant_end_to_end(tmp_path):
    """sample (generator=evidence_cot) -> caches -> faith (two methods here) -> report, on a sweep of two tasks."""
    tasks = "niah_mq_q2,vt_h2_c3"
    for t in tasks.split(","):  # 2 rows each at the lanes' 1,024 tokens (a sweep cannot set dataset.num_samples)
        made = run_script("prepare_data.py", f"dataset={t}", "length=1024", "dataset.num_samples=2",
                          f"paths.data_dir={tmp_path / 'data'}", f"paths.model_cache_dir={CACHE_DIR}", cwd=tmp_path)
        assert made.returncode == 0, made.stderr[-3000:]
    out = _lane(tmp_path, "sample", variant="cot_evidence", tasks=tasks)
    assert out.returncode == 0, out.stderr[-3000:]
    vdir = tmp_path / "runs" / "cot_evidence"
    for t in tasks.split(","):
        assert json.loads((vdir / "sample" / f"dataset={t}" / "funnel.json").read_text())["kept"] == 1
    out = _lane(tmp_path, "faith", "attribution=[ifr_multi_hop_both,attention]", "mode.faithfulness.steps=2",
                variant="cot_evidence", tasks=tasks)
    assert out.returncode == 0, out.stderr[-3000:]
    for t in tasks.split(","):
        job = vdir / "faith_rec" / f"dataset={t},max_examples=1"
        manifest = json.loads((job / "manifest.json").read_text())
        assert manifest["dataset"]["kind"] == "cache"
        assert manifest["dataset"]["path"] == f"{tmp_path / 'runs'}/cot_evidence/samples/{t}.jsonl"
        recs = [json.loads(line) for line in (job / "results.jsonl").read_text().splitlines()]
        assert {r["method"] for r in recs} == {"ifr_multi_hop_both", "attention"}
        assert all(r["thinking_span"] is not None and set(r["faithfulness"]["row"]["common"]) == {"all", "nonstop"}
                   for r in recs)
    # FlashTrace's hops=3 recall row: a recovery-only lane (the faith lanes' deletion-set settings are not its own)
    out = _lane(tmp_path, "rec", variant="cot_evidence", tasks="vt_h2_c3")
    assert out.returncode == 0, out.stderr[-3000:]
    job = vdir / "rec_h3" / "dataset=vt_h2_c3,max_examples=1"
    (rec,) = [json.loads(line) for line in (job / "results.jsonl").read_text().splitlines()]
    assert rec["recovery_budget"]["stop_tokens_skipped"] and "faithfulness" not in rec
    assert json.loads((job / "manifest.json").read_text())["config"]["attribution"]["ifr_multi_hop_both"]["hops"] == 3
    # one example a task: the report's floor of 10 would leave every figure unranked ("too few (1)")
    out = _lane(tmp_path, "report", "min_examples=1", variant="cot_evidence", tasks=tasks)
    assert out.returncode == 0, out.stderr[-3000:]
    md = (vdir / "report" / "table1.md").read_text()
    assert md.startswith("**evidence CoT (labelled synthetic)")
    assert "| ifr_multi_hop_both (hops=3) |" in md
    assert "| niah_mq_q2 | cache: " in md and "| evidence_cot | 1 | 1 | 1 | 1 | 1 | 1.000 |" in md
    pairs = (vdir / "report" / "pairs.md").read_text()
    assert "## Faithfulness by deletion set" in pairs and "RISE@all" in pairs


def test_another_model_family_has_folders_of_its_own(tmp_path):
    """TABLE1_MODEL=gemma3-270m: the lanes pass model=gemma3-270m and write under <TABLE1_DIR>/gemma3-270m/ (the
    interpreter is replaced by one that prints the command it was given)."""
    echo = tmp_path / "echo.sh"
    echo.write_text('#!/bin/sh\necho "$@"\n')
    echo.chmod(0o755)
    env = dict(os.environ, TABLE1_DIR=str(tmp_path / "runs"), TABLE1_TASKS="niah_mq_q2", TABLE1_MODEL="gemma3-270m",
               PYTHON=str(echo))
    out = subprocess.run(["bash", str(SCRIPT), "cot_evidence", "sample"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    args = out.stdout.split()
    assert "model=gemma3-270m" in args and "generator=evidence_cot" in args
    assert "paths.data_dir=data/gemma3-270m" in args  # RULER data fitted to Gemma's tokenizer, apart from SmolLM2's
    assert f"paths.samples_dir={tmp_path / 'runs' / 'gemma3-270m' / 'cot_evidence' / 'samples'}" in args
    smol = subprocess.run(["bash", str(SCRIPT), "cot_evidence", "sample"], capture_output=True, text=True,
                          env={k: v for k, v in env.items() if k != "TABLE1_MODEL"})
    assert not any(a.startswith("model=") for a in smol.stdout.split())
    assert f"paths.samples_dir={tmp_path / 'runs' / 'cot_evidence' / 'samples'}" in smol.stdout.split()
    # the faith lane: another family runs the five methods of the family comparison, SmolLM2 the seven;
    # TABLE1_METHODS sets them
    for samples in (tmp_path / "runs" / "gemma3-270m" / "cot_evidence" / "samples",
                    tmp_path / "runs" / "cot_evidence" / "samples"):
        samples.mkdir(parents=True, exist_ok=True)
        (samples / "niah_mq_q2.jsonl").write_text("{}\n")
    five = "attribution=[ifr_multi_hop_both,ifr_all_positions,attention,attnlrp,perturbation]"
    gemma = subprocess.run(["bash", str(SCRIPT), "cot_evidence", "faith"], env=env, capture_output=True, text=True)
    assert gemma.returncode == 0 and five in gemma.stdout.split(), gemma.stderr
    smol = subprocess.run(["bash", str(SCRIPT), "cot_evidence", "faith"], capture_output=True, text=True,
                          env={k: v for k, v in env.items() if k != "TABLE1_MODEL"})
    assert ("attribution=[ifr_multi_hop_both,ifr_multi_hop,ft_attnlrp,ifr_all_positions,attention,attnlrp,"
            "perturbation]") in smol.stdout.split()
    chosen = subprocess.run(["bash", str(SCRIPT), "cot_evidence", "faith"], capture_output=True, text=True,
                            env=dict(env, TABLE1_METHODS="attention"))
    assert "attribution=[attention]" in chosen.stdout.split()
    # families: each variant with a report for both models, SmolLM2's first
    runs = tmp_path / "runs"
    for d in (runs / "cot_evidence" / "report", runs / "gemma3-270m" / "cot_evidence" / "report",
              runs / "cot_self" / "report"):
        d.mkdir(parents=True)
        (d / "table1.json").write_text("{}")
    fam = subprocess.run(["bash", str(SCRIPT), "families"], env=env, capture_output=True, text=True)
    assert fam.returncode == 0, fam.stderr
    (line,) = fam.stdout.splitlines()  # cot_self has no Gemma report: left out
    assert f"families=[{runs}/cot_evidence/report,{runs}/gemma3-270m/cot_evidence/report]" in line.split()
    assert f"hydra.run.dir={runs}/gemma3-270m/families/cot_evidence" in line.split()
    alone = subprocess.run(["bash", str(SCRIPT), "families"], capture_output=True, text=True,
                           env={k: v for k, v in env.items() if k != "TABLE1_MODEL"})
    assert alone.returncode == 2 and "set TABLE1_MODEL" in alone.stderr
