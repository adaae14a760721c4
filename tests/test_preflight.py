"""Config mistakes on the command line: one line and exit code 2 (ctxbench.stages.preflight), Hydra's full report with
HYDRA_FULL_ERROR=1."""

import pytest

from ctxbench.stages.conf import register_configs
from ctxbench.stages.preflight import check_overrides

from helpers.cli import run_script
from helpers.paths import CONF

register_configs()
DATASETS = ", ".join(sorted(p.stem for p in (CONF / "dataset").glob("*.yaml")))


@pytest.mark.parametrize("args, line", [
    (["attribution.ifr_multi_hop.hopz=3"], "unknown key `hopz` in attribution.ifr_multi_hop; did you mean `hops`?"),
    (["lenght=1024"], "unknown key `lenght`; did you mean `length`?"),
    (["mode.recovery.fractoin=0.1"], "unknown key `fractoin` in mode.recovery; did you mean `fraction`?"),
    (["paths.rot=x"], "unknown key `rot` in paths; did you mean `root`?"),
    (["attribution=[attention]", "attribution.ifr_multi_hop.hops=3"],
     "attribution.ifr_multi_hop is not selected (attribution=[attention]); add it to the list, "
     "attribution=[attention,ifr_multi_hop], to set its parameters"),
    (["attribution=ifr_multi_hop,attention"], "`attribution=ifr_multi_hop,attention` is a sweep, which needs -m; for a "
                                              "list of options write attribution=[ifr_multi_hop,attention]"),
    (["dataset=nope"], f"unknown dataset option `nope`; options: {DATASETS}"),
    (["-m", "dataset=niah_mq_q2,nope"], f"unknown dataset option `nope`; options: {DATASETS}"),
    (["attribution=[attention,nope]"], "unknown attribution option `nope`; options: " +
     ", ".join(sorted(p.stem for p in (CONF / "attribution").glob("*.yaml")))),
    (["length=abc"], "length: Value 'abc' of type 'str' could not be converted to Integer"),
])
def test_a_config_mistake_is_one_line(args, line, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    assert check_overrides(CONF, "run", args) == line


@pytest.mark.parametrize("args", [
    [], ["--help"], ["attribution.ifr_multi_hop.hops=3", "mode=[faithfulness,recovery]"],
    ["-m", "dataset=niah_mq_q2,vt_h2_c3", "length=512,1024"], ["+experiment=table1", "dataset=vt_h2_c3"],
    ["hydra.run.dir=/tmp/x", "hydra.job.chdir=false"], ["--cfg", "job", "length=512"],
])
def test_what_is_right_passes(args, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    assert check_overrides(CONF, "run", args) is None


def test_other_stages_are_checked_against_their_own_config(monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    assert check_overrides(CONF, "sample", ["max_row=3"]) == "unknown key `max_row`; did you mean `max_rows`?"
    assert check_overrides(CONF, "sample", ["max_rows=3", "generator=evidence_cot"]) is None


def test_the_command_line_exits_2_with_one_line_and_hydra_full_error_shows_everything(tmp_path):
    args = ["attribution.ifr_multi_hop.hopz=3", f"hydra.run.dir={tmp_path / 'run'}"]
    out = run_script("run_exp.py", *args, cwd=tmp_path, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: unknown key `hopz` in attribution.ifr_multi_hop; did you mean `hops`?"]
    assert not (tmp_path / "run").exists()
    full = run_script("run_exp.py", *args, cwd=tmp_path, full_error=True, timeout=300)
    assert full.returncode == 1 and "Traceback" in full.stderr and "Key 'hopz' not in" in full.stderr


def test_help_lists_the_groups_and_the_composed_config_without_the_schema_groups(tmp_path):
    out = run_script("run_exp.py", "--help", "dataset=vt_h2_c3", cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("run_exp is powered by Hydra.\n\n== Configuration groups ==\n")
    assert f"\ndataset: {DATASETS}\n" in out.stdout
    assert "\nexperiment: optuna_bm25, optuna_dense, optuna_sampling, table1\n" in out.stdout
    assert "schema/" not in out.stdout and "hydra:" not in out.stdout.split("== Config ==")[0]
    assert "  name: vt_h2_c3\n" in out.stdout.split("== Config ==")[1]  # the config with the command's overrides
    assert not any(tmp_path.iterdir())  # no run folder
    bad = run_script("run_exp.py", "--help", "datset=x", cwd=tmp_path, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: unknown key `datset`; did you mean `dataset`?"


def test_options_from_hydra_searchpath_count(tmp_path, monkeypatch):
    """A config folder added with hydra.searchpath (a plug-in's own options) is part of what the check knows."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    (tmp_path / "generator").mkdir()
    (tmp_path / "generator" / "slow.yaml").write_text("_target_: ctxbench.generators.replay.ReplayGenerator\n"
                                                      "path: answers.jsonl\n")
    extra = f"hydra.searchpath=[file://{tmp_path}]"
    assert check_overrides(CONF, "sample", [extra, "generator=slow"]) is None
    assert check_overrides(CONF, "sample", [extra, "generator=slowx"]) == (
        "unknown generator option `slowx`; options: evidence_cot, hf, openai, replay, slow")
    assert check_overrides(CONF, "sample", ["-m", extra, "generator=hf,slow"]) is None
