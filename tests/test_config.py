"""Hydra composition: every option of every group composes against the schemas and builds into its part (nothing
loaded); typos are errors; stages run from the CLI."""

import functools
import json
import re
import socket
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from hydra.utils import get_class
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from ctxbench.tracking.base import Tracker
from ctxbench.attribution import Attributor
from ctxbench.stages.conf import register_configs
from ctxbench.datasets.base import Dataset
from ctxbench.generators.base import Generator
from ctxbench.metrics.scorer import Scorer
from ctxbench.models.spec import ModelConfig
from ctxbench.core.part import Part
from ctxbench.core.part import build, build_all, find_targets
from ctxbench.rerankers.base import Reranker
from ctxbench.retrieval.data import RetrievalData
from ctxbench.retrieval.mode import RetrievalMode
from ctxbench.retrievers.base import Retriever
from ctxbench.sampling.judges import Judge

from helpers.cli import run_script
from helpers.configs import compose_stage
from helpers.paths import CACHE_DIR, CONF
from helpers.records import RULER_LINE, write_jsonl, write_ruler_task

# hydra/default.yaml configures Hydra itself (checked by test_run_and_sweep_dirs_set_once). Every list of options
# below is read from the files in conf/<group>/: a new file is a new test case.
GROUP_OPTIONS = sorted((p.parent.name, p.stem) for p in CONF.glob("*/*.yaml") if p.parent.name != "hydra")
MAIN_CONFIGS = ("run", "sample", "prepare")
# The groups whose options are parts (conf/<group>/<option>.yaml names a class by _target_) and the base every option
# must build into, as the stages build them (ctxbench.core.part.build); attribution and mode select several options at
# once, each under its own key.
PART_BASES = {
    "attribution": Attributor,
    "mode": (Scorer, RetrievalMode),  # mode=retrieval evaluates a retriever instead of scoring attributions
    "retriever": Retriever,
    "reranker": Reranker,
    "generator": Generator,
    "judge": Judge,
    "dataset": (Dataset, RetrievalData),  # the retrieval data sets (beir, wiki_demo) are datasets of mode=retrieval
    "logger": Tracker,
}
KEYED_GROUPS = ("attribution", "mode", "logger")
BACKENDS = ("hf", "openai")  # the model group's backends (ctxbench.models.spec.ModelConfig)


@functools.cache
def _groups_of(config_name):
    return frozenset(compose_stage(config_name).keys())


def _fill_mandatory(group, option, tmp_path):
    """What a user must add to select the option (``???`` or null in its file; the files are made by the test), and
    a temporary root."""
    extra = [f"paths.root={tmp_path}"]
    if (group, option) == ("dataset", "jsonl"):
        extra.append(f"dataset.path={tmp_path / 'any.jsonl'}")
    if (group, option) == ("reranker", "cross_encoder"):  # no cross-encoder is packaged: the user names one
        extra.append(f"reranker.model={tmp_path / 'cross-encoder'}")
    if (group, option) == ("generator", "replay"):  # the responses made elsewhere
        extra.append(f"generator.path={tmp_path / 'responses.jsonl'}")
    return extra


@pytest.fixture
def nothing_loads(monkeypatch):
    """Building a part loads no model and opens no connection: a part that needs the ``model`` group's LM is handed it
    later (``use_lm``), one with a model of its own loads it on first use."""
    from transformers import PreTrainedModel

    from ctxbench.models import causal_lm

    def refused(what):
        def call(*args, **kwargs):
            raise AssertionError(f"building a part {what}")
        return call

    monkeypatch.setattr(socket.socket, "connect", refused("opened a connection"))
    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(refused("loaded model weights")))
    for name in ("load_causal_lm", "load_tokenizer"):  # wherever the loaders were imported by name
        real = getattr(causal_lm, name)
        for module in [m for m in list(sys.modules.values()) if getattr(m, name, None) is real]:
            monkeypatch.setattr(module, name, refused(f"called {name}"))


def _stand_in_lm():
    """What the stage hands a part that needs the LM (a ``LoadedLM``), without weights: a one-parameter module."""
    import torch

    from ctxbench.models import LoadedLM
    from ctxbench.models.causal_lm import ModelSource

    return LoadedLM(model=torch.nn.Linear(1, 1), tokenizer=None, config=ModelConfig(), source=ModelSource("stand-in"),
                    device=torch.device("cpu"))


def _without_identity(settings):
    """A part's settings as a config again: ``identity`` (what its model files are) is reported, not a parameter."""
    if isinstance(settings, dict):
        part = "_target_" in settings
        return {k: _without_identity(v) for k, v in settings.items() if not (part and k == "identity")}
    if isinstance(settings, list):
        return [_without_identity(v) for v in settings]
    return settings


def _settings_of_built(node, where):
    part = build(node, where)
    if part.needs_lm:
        part.use_lm(_stand_in_lm())
    return part, part.settings()


def _check_part(node, group, option):
    where = f"{group}.{option}"
    part, settings = _settings_of_built(node, where)
    assert isinstance(part, Part) and isinstance(part, PART_BASES[group]), (where, type(part))
    assert type(part) is get_class(node["_target_"]), where  # the _target_ names the class built
    if isinstance(part, Scorer):  # a scorer files its results under its name: the stage refuses another key
        assert part.name == option, where
    # the settings are what fingerprints, caches and reports store: JSON as they are, naming the class, and a config
    # that builds the same part again
    assert json.loads(json.dumps(settings)) == settings, where
    assert get_class(settings["_target_"]) is type(part), where
    assert _settings_of_built(_without_identity(settings), where)[1] == settings, where


def _check_model(model, option):
    """The model group holds settings, not a part: its file converts to ``ModelConfig``, and what it names resolves
    without loading anything (a local folder or packaged GGUF that exists, a hub id, an endpoint)."""
    from ctxbench.models import resolve_source

    assert isinstance(model, ModelConfig), option
    assert model.backend in BACKENDS, f"model/{option}.yaml: backend={model.backend!r}"
    if model.backend == "hf":
        source = resolve_source(model.path, model.gguf_file)
        if source.is_local:
            assert Path(source.location).is_dir(), (option, source)
            assert source.gguf_file is None or (Path(source.location) / source.gguf_file).is_file(), (option, source)
    else:
        # a key variable, or none for a local server without authentication (model=vllm)
        assert model.base_url and model.model_name and (model.api_key_env or option == "vllm"), option


def test_groups_are_present():
    groups = {g for g, _ in GROUP_OPTIONS}
    assert {"dataset", "retriever", "model", "mode", "attribution", "judge", "paths"} <= groups
    assert len([o for g, o in GROUP_OPTIONS if g == "dataset"]) >= 13


def test_every_group_of_parts_has_a_base():
    """A group whose files name classes is a group of parts: it needs its base in PART_BASES (every option of it is
    then built by test_every_option_composes_and_builds, an option that only extends another one too)."""
    groups = {g for g, _ in find_targets(CONF)}
    assert groups <= set(PART_BASES), f"a new group of parts: add its base class to PART_BASES: {groups}"


@pytest.mark.parametrize("group, option", GROUP_OPTIONS, ids=[f"{g}={o}" for g, o in GROUP_OPTIONS])
def test_every_option_composes_and_builds(group, option, tmp_path, monkeypatch, nothing_loads):
    """Each option, selected in each stage config that has its group, composes against the schema, and builds: a part
    into an instance of its group's base with settings that round-trip, a model into its settings."""
    (tmp_path / "cross-encoder").mkdir()
    write_jsonl(tmp_path / "responses.jsonl", [{"id": "x", "response": "\\box{x}"}])
    if group == "experiment":  # global bundles, added with +experiment=<name>, each for one stage
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import open_dict

        composed = []
        for main in ("run", "sample"):
            try:  # with Hydra's node as in a run (a bundle may name the job's folder: ${hydra:runtime.output_dir})
                composed.append(compose_stage(main, f"+experiment={option}", f"paths.root={tmp_path}",
                                              f"hydra.runtime.output_dir={tmp_path / 'job'}", hydra=True))
            except Exception as exc:  # a bundle of the other stage: its keys and groups are not this stage's
                assert re.search("not in|No match in the defaults list", str(exc.__cause__ or exc)), exc
        assert len(composed) == 1, f"experiment/{option}.yaml composes with {len(composed)} stages"
        cfg = composed[0]
        HydraConfig.instance().set_config(cfg)
        with open_dict(cfg):
            del cfg["hydra"]
        OmegaConf.to_object(cfg)
        for key in KEYED_GROUPS:
            for name, node in (cfg.get(key) or {}).items():
                _check_part(node, key, name)
        return
    used = False
    for main in MAIN_CONFIGS:
        if group not in _groups_of(main):
            continue
        used = True
        cfg = compose_stage(main, f"{group}={option}", *_fill_mandatory(group, option, tmp_path))
        obj = OmegaConf.to_object(cfg)  # validates against the schema and resolves interpolations
        node = getattr(obj, group)
        if group in KEYED_GROUPS and option == "none":
            assert node == {}  # logger=none selects nothing
            continue
        if group in KEYED_GROUPS:
            assert option in node  # options of these groups stay separate, keyed by name
        elif group == "dataset":
            assert node.name in (option, "jsonl")
        if group in PART_BASES:
            part = cfg[group][option] if group in KEYED_GROUPS else cfg[group]
            if part.get("api_key_env"):  # an endpoint part reads its key when it is built (nothing is sent here)
                monkeypatch.setenv(part.api_key_env, "sk-test-not-sent")
            _check_part(part, group, option)
        elif group == "model":
            _check_model(node, option)
    assert used, f"{group}/{option}.yaml is not reachable from any main config"


def test_dataset_options_match_their_names():
    for g, o in GROUP_OPTIONS:
        if g == "dataset":
            assert OmegaConf.load(CONF / g / f"{o}.yaml").name == o


def test_several_modes_and_methods_in_one_run():
    cfg = compose_stage("run", "mode=[faithfulness,recovery,coverage]", "attribution=[ifr_multi_hop_both,attention]")
    assert list(cfg.mode) == ["faithfulness", "recovery", "coverage"]
    assert list(cfg.attribution) == ["ifr_multi_hop_both", "attention"]
    assert cfg.attribution.ifr_multi_hop_both.hop0 == "all_gen"


def test_run_and_sweep_dirs_set_once():
    for main in ("run", "sample", "prepare", "report"):
        text = (CONF / f"{main}.yaml").read_text()
        assert "hydra: default" in text and "dir:" not in text
    cfg = compose_stage("run", hydra=True)
    assert cfg.hydra.run.dir.startswith("outputs/run_exp/niah_mq_q2/") and cfg.hydra.job.name == "run_exp"
    assert OmegaConf.to_container(cfg.hydra.sweep)["subdir"] == "${hydra.job.num}_${hydra.job.override_dirname}"


def test_every_parameter_can_be_overridden():
    """Parameters come from the constructors, so ones the YAML does not list can be set without '+'."""
    cfg = compose_stage("run", "attribution=[ifr_multi_hop_both]", "attribution.ifr_multi_hop_both.hops=3",
                           "attribution.ifr_multi_hop_both.tau=0.01", "mode=[recovery]", "mode.recovery.fraction=0.05",
                           "dataset.num_samples=20")
    method = build_all(cfg.attribution, "attribution")["ifr_multi_hop_both"]
    assert (method.hops, method.tau, method.hop0) == (3, 0.01, "all_gen")
    assert build_all(cfg.mode, "mode")["recovery"].metrics()[0].label == "Recall@5%"
    assert build(cfg.dataset, "dataset").num_samples == 20
    # a value the constructor refuses fails when the part is built, naming the key
    bad = compose_stage("run", "attribution=[ifr_multi_hop_both]", "attribution.ifr_multi_hop_both.hop0=first")
    with pytest.raises(Exception, match=r"attribution.ifr_multi_hop_both: .*hop0='first'"):
        build_all(bad.attribution, "attribution")


def test_quick_default_and_table1_bundle():
    quick = compose_stage("run")
    assert (quick.dataset.name, quick.dataset.length, quick.max_examples) == ("niah_mq_q2", 512, 3)
    assert list(quick.attribution) == ["ifr_multi_hop", "random"] and list(quick.mode) == ["faithfulness", "recovery"]
    t1 = compose_stage("run", "+experiment=table1", "dataset=vt_h4_c1")
    assert (t1.dataset.name, t1.dataset.length, t1.max_examples, t1.prompt_format) == ("vt_h4_c1", 1024, 100, "table1")
    assert list(t1.attribution) == ["ifr_multi_hop_both", "ifr_multi_hop", "ft_attnlrp", "ifr_all_positions",
                                    "attention", "integrated_gradients", "attnlrp", "perturbation", "copy_match",
                                    "position", "random", "length"]


@pytest.mark.parametrize("override", ["dataset.lenght=1024", "model.dtpye=float32", "mode.faithfulness.stpes=3",
                                      "attribution.ifr_multi_hop.hopz=2", "prompt_fromat=bare"])
def test_misspelt_key_is_rejected(override):
    with pytest.raises((ConfigCompositionException, ConfigKeyError)):
        compose_stage("run", override)


def test_wrong_type_and_unknown_option_are_rejected():
    with pytest.raises((ConfigCompositionException, ValidationError)):
        compose_stage("run", "dataset.length=long")
    with pytest.raises(ConfigCompositionException, match="faithfulnes"):
        compose_stage("run", "mode=faithfulnes")


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
    with pytest.raises(ConfigCompositionException):
        compose_stage("run", "model=typo", conf_dir=conf)
    with pytest.raises(ConfigCompositionException, match="hopz"):
        compose_stage("run", "attribution=[typo]", conf_dir=conf)


def _cli(script, *args, full_error=True):
    return run_script(script, *args, full_error=full_error)  # with the traceback unless the test reads the error


def test_cli_cfg_job_and_help():
    out = _cli("run_exp.py", "--cfg", "job")
    assert out.returncode == 0, out.stderr
    cfg = OmegaConf.create(out.stdout)
    assert cfg.dataset.name == "niah_mq_q2" and "faithfulness" in cfg.mode
    out = _cli("run_exp.py", "--help")
    assert out.returncode == 0
    for group in ("mode", "model", "retriever"):  # --help lists each group's options as conf/ holds them
        options = ", ".join(sorted(p.stem for p in (CONF / group).glob("*.yaml")))
        assert f"{group}: {options}" in out.stdout
    out = _cli("run_exp.py", "dataset.lenght=3")
    assert out.returncode != 0 and "lenght" in out.stderr


def test_user_errors_are_one_line(tmp_path):
    """Bad input ends with one 'error:' line naming the file/key and exit code 2; the traceback only on request."""
    bad = tmp_path / "bad.jsonl"
    write_jsonl(bad, [RULER_LINE, "{oops"])
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


@pytest.mark.slow
def test_multirun_writes_one_job_dir_each(tmp_path):
    data = tmp_path / "data"
    for task in ("niah_mq_q2", "vt_h2_c3"):
        write_ruler_task(data, task, length=512)  # the default job's length
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
