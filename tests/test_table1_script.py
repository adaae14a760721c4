"""scripts/table1.sh: its four lanes on one short example of one task, for real (SmolLM2), into a temporary folder.
The lanes must land in the folders the report joins, resume instead of recomputing, and the report must take
FlashTrace's recovery from the hops=3 lane."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "table1.sh"
JOB = "dataset=niah_mq_q2,max_examples=1"
SEVEN = ["ifr_multi_hop_both", "ifr_multi_hop", "ft_attnlrp", "ifr_all_positions", "attention", "attnlrp",
         "perturbation"]


def _lane(tmp_path, lane, *overrides):
    env = dict(os.environ, TABLE1_DIR=str(tmp_path / "runs"), TABLE1_TASKS="niah_mq_q2", TABLE1_EXAMPLES="1",
               PYTHON=sys.executable, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", str(min(4, os.cpu_count() or 1))))
    short = [] if lane == "report" else ["length=512", f"paths.data_dir={tmp_path / 'data'}"]
    return subprocess.run(["bash", str(SCRIPT), lane, *short, *overrides], env=env, capture_output=True, text=True,
                          timeout=900)


def _records(tmp_path, lane):
    return [json.loads(line) for line in (tmp_path / "runs" / lane / JOB / "results.jsonl").read_text().splitlines()]


def test_unknown_lane_is_one_line(tmp_path):
    out = _lane(tmp_path, "tables")
    assert out.returncode == 2
    assert out.stderr.strip() == "error: scripts/table1.sh: unknown lane 'tables' (faith | ig | rec | report)"


@pytest.mark.slow
def test_lanes_resume_and_join_in_the_report(tmp_path):
    for lane, extra in [("rec", []), ("faith", []), ("ig", ["attribution.integrated_gradients.ig_steps=2"])]:
        out = _lane(tmp_path, lane, *extra)
        assert out.returncode == 0, out.stderr[-3000:]
    rec, faith, ig = (_records(tmp_path, lane) for lane in ("rec_k3", "faith_rec", "ig"))
    assert [r["method"] for r in rec] == ["ifr_multi_hop_both"] and set(rec[0]) >= {"recovery"}
    assert "faithfulness" not in rec[0]
    assert sorted(r["method"] for r in faith) == sorted(SEVEN)
    assert [r["method"] for r in ig] == ["integrated_gradients"]
    assert all(set(r["faithfulness"]) == {"row"} for r in faith + ig)  # Table 1's view only

    # a rerun resumes: nothing is recomputed, nothing is lost
    again = _lane(tmp_path, "rec")
    assert again.returncode == 0, again.stderr[-3000:]
    assert _records(tmp_path, "rec_k3") == rec

    out = _lane(tmp_path, "report")
    assert out.returncode == 0, out.stderr[-3000:]
    saved = json.loads((tmp_path / "runs" / "report" / "table1.json").read_text())
    cells = {c["method"]: c for c in saved["cells"] if c["dataset"] == "niah_mq_q2"}
    assert sorted(cells) == sorted(SEVEN + ["integrated_gradients"])
    # FlashTrace's recall is the hops=3 lane's (prefer_later, rec_k3 last); its faithfulness the faith lane's
    flash = next(r for r in faith if r["method"] == "ifr_multi_hop_both")
    figures = cells["ifr_multi_hop_both"]["figures"]
    assert figures["Recall@10%"]["mean"] == pytest.approx(rec[0]["recovery"]["row"])
    assert figures["RISE"]["mean"] == pytest.approx(flash["faithfulness"]["row"]["RISE"])
    assert (tmp_path / "runs" / "report" / "table1.md").exists()
