"""Hydra composition: every option of every group composes against the schemas; typos are errors; stages run from the
CLI."""

import json
import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from ctxbench.conf import register_configs
from ctxbench.parts import build, build_all

from conftest import CACHE_DIR, ROOT

CONF = ROOT / "conf"
register_configs()

# hydra/default.yaml configures Hydra itself (checked by test_run_and_sweep_dirs_set_once)
GROUP_OPTIONS = sorted((p.parent.name, p.stem) for p in CONF.glob("*/*.yaml") if p.parent.name != "hydra")
MAIN_CONFIGS = {"run": None, "sample": None, "prepare": None}


def _compose(config_name, overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides)


def _groups_of(config_name):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name=config_name)
    return set(cfg.keys())


def _fill_mandatory(group, option):
    extra = ["paths.root=/tmp/ctxbench-root"]
    if (group, option) == ("dataset", "jsonl"):
        extra.append("dataset.path=/tmp/any.jsonl")
    if (group, option) == ("reranker", "cross_encoder"):  # no cross-encoder is packaged: the user names one
        extra.append("reranker.model=/tmp/any-model")
    return extra


def test_groups_are_present():
    groups = {g for g, _ in GROUP_OPTIONS}
    assert {"dataset", "retriever", "model", "mode", "attribution", "judge", "paths"} <= groups
    assert len([o for g, o in GROUP_OPTIONS if g == "dataset"]) >= 13


@pytest.mark.parametrize("group, option", GROUP_OPTIONS, ids=[f"{g}={o}" for g, o in GROUP_OPTIONS])
def test_every_option_composes(group, option):
    if group == "experiment":  # global bundles, added with +experiment=<name>
        cfg = _compose("run", [f"+experiment={option}", "paths.root=/tmp/ctxbench-root"])
        OmegaConf.to_object(cfg)
        return
    used = False
    for main in MAIN_CONFIGS:
        if group not in _groups_of(main):
            continue
        used = True
        cfg = _compose(main, [f"{group}={option}"] + _fill_mandatory(group, option))
        obj = OmegaConf.to_object(cfg)  # validates against the schema and resolves interpolations
        node = getattr(obj, group)
        if group in ("mode", "attribution"):
            assert option in node  # options of these groups stay separate, keyed by name
        elif group == "dataset":
            assert node.name in (option, "jsonl")
    assert used, f"{group}/{option}.yaml is not reachable from any main config"


def test_dataset_options_match_their_names():
    for g, o in GROUP_OPTIONS:
        if g == "dataset":
            assert OmegaConf.load(CONF / g / f"{o}.yaml").name == o


def test_several_modes_and_methods_in_one_run():
    cfg = _compose("run", ["mode=[faithfulness,recovery,coverage]", "attribution=[ifr_multi_hop_both,attention]"])
    assert list(cfg.mode) == ["faithfulness", "recovery", "coverage"]
    assert list(cfg.attribution) == ["ifr_multi_hop_both", "attention"]
    assert cfg.attribution.ifr_multi_hop_both.hop0 == "all_gen"


def test_run_and_sweep_dirs_set_once():
    for main in ("run", "sample", "prepare", "report"):
        text = (CONF / f"{main}.yaml").read_text()
        assert "hydra: default" in text and "dir:" not in text
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="run", return_hydra_config=True)
    assert cfg.hydra.run.dir.startswith("outputs/run_exp/niah_mq_q2/") and cfg.hydra.job.name == "run_exp"
    assert OmegaConf.to_container(cfg.hydra.sweep)["subdir"] == "${hydra.job.num}_${hydra.job.override_dirname}"


def test_every_parameter_can_be_overridden():
    """Parameters come from the constructors, so ones the YAML does not list can be set without '+'."""
    cfg = _compose("run", ["attribution=[ifr_multi_hop_both]", "attribution.ifr_multi_hop_both.hops=3",
                           "attribution.ifr_multi_hop_both.tau=0.01", "mode=[recovery]", "mode.recovery.fraction=0.05",
                           "dataset.num_samples=20"])
    method = build_all(cfg.attribution, "attribution")["ifr_multi_hop_both"]
    assert (method.hops, method.tau, method.hop0) == (3, 0.01, "all_gen")
    assert build_all(cfg.mode, "mode")["recovery"].metrics()[0].label == "Recall@5%"
    assert build(cfg.dataset, "dataset").num_samples == 20
    # a value the constructor refuses fails when the part is built, naming the key
    bad = _compose("run", ["attribution=[ifr_multi_hop_both]", "attribution.ifr_multi_hop_both.hop0=first"])
    with pytest.raises(Exception, match=r"attribution.ifr_multi_hop_both: .*hop0='first'"):
        build_all(bad.attribution, "attribution")


def test_quick_default_and_table1_bundle():
    quick = _compose("run", [])
    assert (quick.dataset.name, quick.dataset.length, quick.max_examples) == ("niah_mq_q2", 512, 3)
    assert list(quick.attribution) == ["ifr_multi_hop", "random"] and list(quick.mode) == ["faithfulness", "recovery"]
    t1 = _compose("run", ["+experiment=table1", "dataset=vt_h4_c1"])
    assert (t1.dataset.name, t1.dataset.length, t1.max_examples, t1.prompt_format) == ("vt_h4_c1", 1024, 100, "table1")
    assert list(t1.attribution) == ["ifr_multi_hop_both", "ifr_multi_hop", "ft_attnlrp", "ifr_all_positions",
                                    "attention", "integrated_gradients", "attnlrp", "perturbation"]


@pytest.mark.parametrize("override", ["dataset.lenght=1024", "model.dtpye=float32", "mode.faithfulness.stpes=3",
                                      "attribution.ifr_multi_hop.hopz=2", "prompt_fromat=bare"])
def test_misspelt_key_is_rejected(override):
    with pytest.raises((ConfigCompositionException, ConfigKeyError)):
        _compose("run", [override])


def test_wrong_type_and_unknown_option_are_rejected():
    with pytest.raises((ConfigCompositionException, ValidationError)):
        _compose("run", ["dataset.length=long"])
    with pytest.raises(ConfigCompositionException, match="faithfulnes"):
        _compose("run", ["mode=faithfulnes"])


def test_misspelt_key_in_a_group_file_is_rejected(tmp_path):
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "model" / "typo.yaml").write_text("name: t\npaht: x\n")
    # a part's file is checked against its class's constructor (schema registered from the file's _target_)
    (conf / "attribution" / "typo.yaml").write_text(
        "defaults:\n  - /schema/attribution/typo@typo\n  - _self_\ntypo:\n"
        "  _target_: ctxbench.attribution.multi_hop.MultiHopIFRAttributor\n  hopz: 2\n")
    register_configs(conf)
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        with pytest.raises(ConfigCompositionException):
            compose(config_name="run", overrides=["model=typo"])
        with pytest.raises(ConfigCompositionException, match="hopz"):
            compose(config_name="run", overrides=["attribution=[typo]"])


def _cli(script, *args, cwd=None, full_error=True):
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    if full_error:
        env["HYDRA_FULL_ERROR"] = "1"
    return subprocess.run([sys.executable, str(ROOT / "exp" / "exp2" / script), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_cli_cfg_job_and_help():
    out = _cli("run_exp.py", "--cfg", "job")
    assert out.returncode == 0, out.stderr
    cfg = OmegaConf.create(out.stdout)
    assert cfg.dataset.name == "niah_mq_q2" and "faithfulness" in cfg.mode
    out = _cli("run_exp.py", "--help")
    assert out.returncode == 0
    for group in ("mode", "model", "retriever"):  # --help lists each group's options as conf/ holds them
        options = ", ".join(sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml")))
        assert f"{group}: {options}" in out.stdout
    out = _cli("run_exp.py", "dataset.lenght=3")
    assert out.returncode != 0 and "lenght" in out.stderr


def test_user_errors_are_one_line(tmp_path):
    """Bad input ends with one 'error:' line naming the file/key and exit code 2; the traceback only on request."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(RULER_LINE) + "\n{oops\n")
    args = ["dataset=jsonl", f"dataset.path={bad}", "dataset.name=bad", f"paths.model_cache_dir={CACHE_DIR}",
            f"paths.samples_dir={tmp_path / 'samples'}", f"hydra.run.dir={tmp_path / 'run'}"]
    out = _cli("run_exp.py", *args, full_error=False)
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {bad}:2: ") and "Traceback" not in out.stderr
    out = _cli("run_exp.py", *args[:-1], "attribution.random.seed=x", f"hydra.run.dir={tmp_path / 'run2'}",
               full_error=False)
    assert out.returncode != 0 and "attribution.random.seed" in out.stderr and "Traceback" not in out.stderr
    out = _cli("run_exp.py", "dataset=jsonl", f"dataset.path={tmp_path / 'missing.jsonl'}",
               f"hydra.run.dir={tmp_path / 'run3'}", f"paths.model_cache_dir={CACHE_DIR}", full_error=False)
    assert out.returncode == 2 and "missing.jsonl: no such RULER-format JSONL file" in out.stderr
    out = _cli("run_exp.py", *args, full_error=True)  # HYDRA_FULL_ERROR=1: the traceback is shown
    assert out.returncode != 0 and "Traceback" in out.stderr


RULER_LINE = {"index": 0, "input": "Noise. One of the special magic numbers for k is: 1234567.\nWhat is it?",
              "outputs": ["1234567"], "answer_prefix": " Answer:",
              "needle_spans": [{"span": [7, 58], "sentence": "One of the special magic numbers for k is: 1234567."}]}


@pytest.mark.slow
def test_multirun_writes_one_job_dir_each(tmp_path):
    data = tmp_path / "data"
    for task in ("niah_mq_q2", "vt_h2_c3"):
        f = data / "ruler_multihop" / "512" / task / "validation.jsonl"  # the default job's length
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps(RULER_LINE) + "\n")
    sweep = tmp_path / "sweep"
    out = _cli("run_exp.py", "-m", "dataset=niah_mq_q2,vt_h2_c3", "dry_run=true", f"paths.data_dir={data}",
               f"paths.model_cache_dir={CACHE_DIR}", f"hydra.sweep.dir={sweep}")
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name[0].isdigit())
    # key-value+key-value: a name Hydra takes back unquoted (resume=<dir>, hydra.run.dir=<dir>, runs=[<dir>])
    assert [p.name for p in jobs] == ["0_dataset-niah_mq_q2+dry_run-True", "1_dataset-vt_h2_c3+dry_run-True"]
    for job, task in zip(jobs, ("niah_mq_q2", "vt_h2_c3")):
        manifest = json.loads((job / "manifest.json").read_text())
        assert manifest["config"]["dataset"]["name"] == task
        assert manifest["dataset"]["examples"] == 1 and len(manifest["dataset"]["sha256"]) == 64
        assert manifest["versions"]["torch"] and "commit" in manifest["git"]
        assert (job / ".hydra" / "config.yaml").exists()


@pytest.mark.slow
def test_sample_stage_dry_run_from_the_cli(tmp_path, morehopqa_path):
    args = ["dataset=morehopqa", f"dataset.path={morehopqa_path}", "max_examples=2", "dry_run=true",
            f"paths.model_cache_dir={CACHE_DIR}", f"paths.samples_dir={tmp_path / 'samples'}",
            f"hydra.run.dir={tmp_path / 'run'}"]
    out = _cli("sample_and_filter.py", *args)
    assert out.returncode == 0, out.stderr[-3000:]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    # paths inside the project root (paths.root: the working directory, here tmp_path) are recorded relative to it
    assert manifest["dataset"]["examples"] == 150 and manifest["cache"] == "samples/morehopqa.jsonl"
    assert not (tmp_path / "samples").exists()  # a dry run writes no cache


@pytest.mark.slow
def test_prepare_data_cli_is_deterministic_and_keeps_existing(tmp_path):
    args = ["dataset=niah_mv_v2", "length=512", "dataset.num_samples=6", "dataset.seed=7",
            f"paths.data_dir={tmp_path / 'd'}", f"paths.model_cache_dir={CACHE_DIR}",
            f"hydra.run.dir={tmp_path / 'run'}"]
    out = _cli("prepare_data.py", *args)
    assert out.returncode == 0, out.stderr[-3000:]
    f = tmp_path / "d" / "ruler_multihop" / "512" / "niah_mv_v2" / "validation.jsonl"
    first = f.read_bytes()
    assert len(first.splitlines()) == 6
    out = _cli("prepare_data.py", *args)  # exists: kept
    assert out.returncode == 0 and f.read_bytes() == first
    f.unlink()
    out = _cli("prepare_data.py", *args)  # regenerated: byte-identical
    assert out.returncode == 0 and f.read_bytes() == first
