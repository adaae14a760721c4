"""The shared part base (ctxbench.core.part): settings() leaves out the fields declared neutral and adds identity(),
and the same rule decides the run fingerprint, the report's consistency check, stored search results and sampled
caches. A retriever written outside the library with a neutral num_workers field runs through mode=retrieval, the
sampling stage and preview_prompts, and what it stored is reused when only num_workers changes."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from ctxbench.core.errors import ConfigError, DataError
from ctxbench.core.part import Part, neutral, neutral_fields, settings_of, without_neutral

from helpers.configs import compose_stage, plugin_option, sample_cfg
from helpers.paths import CACHE_DIR, CONF, ROOT
from helpers.retrieval import tiny_beir_folder


@dataclass
class Inner(Part):
    size: int = 3
    cache_dir: str = neutral("/somewhere")

    def identity(self):
        return {"files": "abc"}


@dataclass
class Outer(Part):
    inner: Inner = field(default_factory=Inner)
    ks: tuple = (1, 2)
    batch_size: int = neutral(8)


def test_settings_leave_out_neutral_fields_and_add_identity():
    expected = {"_target_": "test_part.Outer", "ks": [1, 2],
                "inner": {"_target_": "test_part.Inner", "size": 3, "identity": {"files": "abc"}}}
    assert Outer().settings() == settings_of(Outer()) == expected
    assert Outer(batch_size=64, inner=Inner(cache_dir="/elsewhere")).settings() == expected
    assert Outer(inner=Inner(size=4)).settings() != expected
    assert neutral_fields(Outer) == {"batch_size"} and neutral_fields(dict) == frozenset()
    assert Outer(batch_size=2).batch_size == 2  # a neutral field is an ordinary parameter otherwise


def test_without_neutral_drops_the_neutral_fields_of_every_part_node():
    cfg = {"attribution": {"ifr_span": {"_target_": "ctxbench.attribution.ifr.SpanIFRAttributor", "tau": 0.0,
                                        "sink_chunk": 8, "f_cache_bytes": 1}},
           "mode": {"faithfulness": {"_target_": "ctxbench.metrics.faithfulness.FaithfulnessScorer", "steps": 5,
                                     "batch_size": 2}},
           "other": [{"_target_": "no.such.Part", "batch_size": 2}], "batch_size": 1}
    assert without_neutral(cfg) == {
        "attribution": {"ifr_span": {"_target_": "ctxbench.attribution.ifr.SpanIFRAttributor", "tau": 0.0}},
        "mode": {"faithfulness": {"_target_": "ctxbench.metrics.faithfulness.FaithfulnessScorer", "steps": 5}},
        "other": [{"_target_": "no.such.Part", "batch_size": 2}], "batch_size": 1}


def _run_cfg(*overrides):
    return compose_stage("run", f"paths.root={ROOT}", f"paths.model_cache_dir={CACHE_DIR}", *overrides)


def test_the_run_fingerprint_ignores_neutral_fields_only():
    from ctxbench.stages.run import config_fingerprint

    base = config_fingerprint(_run_cfg("attribution=[ifr_multi_hop]", "mode=[faithfulness]"), "ifr_multi_hop")
    for same in ("attribution.ifr_multi_hop.sink_chunk=8", "attribution.ifr_multi_hop.f_cache_bytes=1024",
                 "mode.faithfulness.batch_size=16", "dataset.num_samples=7", "dataset.use_cache=false"):
        assert config_fingerprint(_run_cfg("attribution=[ifr_multi_hop]", "mode=[faithfulness]", same),
                                  "ifr_multi_hop") == base, same
    for other in ("attribution.ifr_multi_hop.hops=2", "mode.faithfulness.steps=5", "dataset.seed=7"):
        assert config_fingerprint(_run_cfg("attribution=[ifr_multi_hop]", "mode=[faithfulness]", other),
                                  "ifr_multi_hop") != base, other


def test_the_reports_check_lets_neutral_fields_differ():
    from ctxbench.reporting.aggregate import check_consistent
    from ctxbench.jobs.results import JobRun

    def job(**faith):
        node = {"_target_": "ctxbench.metrics.faithfulness.FaithfulnessScorer", "steps": 10, "batch_size": 4, **faith}
        return JobRun(Path("."), {"mode": {"faithfulness": node}, "seed": 0}, [], {})

    check_consistent([job(), job(batch_size=16)])  # a batch size does not change the figures
    with pytest.raises(ConfigError, match=r"not comparable: mode.faithfulness.steps \(10, 5\)"):
        check_consistent([job(), job(steps=5)])


def test_the_reports_check_reads_a_setting_a_run_predates_as_its_default():
    """Runs written before ``memory_check`` existed had its default behaviour (no check; a check changes no figure
    either way), so they join a newer run that records the default, and not one that records something else."""
    from ctxbench.reporting.aggregate import check_consistent
    from ctxbench.jobs.results import JobRun
    from ctxbench.stages.report import run_defaults, with_defaults

    def job(**top):  # as the report stage reads a run: the settings it lacks at the schema's defaults
        return JobRun(Path("."), with_defaults(run_defaults(), {"seed": 0, **top}), [], {})

    check_consistent([job(), job(memory_check=True, memory_budget_gib=None, logger={})])
    check_consistent([job(), job(length=512)])  # the input length's default
    with pytest.raises(ConfigError, match=r"not comparable: length \(2048, 512\)"):  # other inputs
        check_consistent([job(), job(length=2048)])
    with pytest.raises(ConfigError, match=r"not comparable: unknown_key"):
        check_consistent([job(), job(unknown_key=1)])


# --- a retriever from outside the library ---------------------------------------------------------------------------

def test_a_plugin_retriever_through_retrieval_sampling_and_preview(tmp_path, monkeypatch):
    from plugin_retriever import OverlapRetriever

    from ctxbench.stages.preview import preview_stage
    from ctxbench.stages.run import run_stage
    from ctxbench.stages.sample import sample_stage

    search_path = plugin_option(tmp_path, "retriever", "overlap", "_target_: plugin_retriever.OverlapRetriever\n"
                                "ice_num: 2\nlowercase: true\nnum_workers: 1\nfields: [prompt]\n")
    monkeypatch.setattr(OverlapRetriever, "calls", 0)

    # mode=retrieval: searched once; a rerun with 4 workers reuses the stored results; another setting is refused
    def retrieval(*overrides):
        cfg = compose_stage("run", search_path, f"paths.root={tmp_path}", f"paths.model_cache_dir={CACHE_DIR}",
                            "mode=retrieval", "dataset=beir", f"dataset.path={data}", "retriever=overlap",
                            "retriever.fields=[text]", "mode.retrieval.k_values=[1,3]",
                            "mode.retrieval.eval_metrics=[ndcg_at_3]", *overrides)
        return run_stage(cfg, tmp_path / "job")

    data = tiny_beir_folder(tmp_path)
    first = retrieval()
    assert OverlapRetriever.calls == 1
    stored = json.loads((tmp_path / "job/search_results/overlap/NoReranker/beir-test.json").read_text())
    assert stored["settings"]["retriever"] == {"_target_": "plugin_retriever.OverlapRetriever", "fields": ["text"],
                                               "query_fields": None, "ice_num": 2, "lowercase": True}
    assert retrieval("retriever.num_workers=4")["results"] == first["results"] and OverlapRetriever.calls == 1
    with pytest.raises(ConfigError, match=r"retriever.lowercase: True -> False"):
        retrieval("retriever.lowercase=false")

    # the sampling stage: its cache's record holds the same settings; 4 workers resume it, another setting is refused
    cfg = sample_cfg(tmp_path / "s", search_path, "retriever=overlap", "max_examples=1")
    out = sample_stage(cfg, tmp_path / "s" / "job")
    cache = Path(out["cache"])
    record = json.loads((cache.parent / (cache.name + ".config.json")).read_text())
    assert record["retriever"]["_target_"] == "plugin_retriever.OverlapRetriever" and "num_workers" not in \
        record["retriever"]
    again = sample_stage(sample_cfg(tmp_path / "s", search_path, "retriever=overlap", "retriever.num_workers=4",
                                    "max_examples=1"), tmp_path / "s" / "job2")
    assert again["kept"] == out["kept"] == 1
    with pytest.raises(DataError, match=r"made with other settings \(retriever.lowercase"):
        sample_stage(sample_cfg(tmp_path / "s", search_path, "retriever=overlap", "retriever.lowercase=false",
                                "max_examples=1"), tmp_path / "s" / "job3")

    # preview_prompts: the retrieved examples are the pool rows sharing most words with each question
    rows = tmp_path / "rows.jsonl"
    pcfg = compose_stage("preview", search_path, f"paths.root={tmp_path}", f"paths.model_cache_dir={CACHE_DIR}",
                         "dataset=morehopqa", "retriever=overlap", "retriever.num_workers=2", "n=2", f"output={rows}")
    assert preview_stage(pcfg, str(tmp_path))["rows"] == 2
    recs = [json.loads(line) for line in rows.read_text().splitlines()]
    assert all(len(r["retrieved"]) == 2 for r in recs)


# --- value checks declared on the fields -----------------------------------------------------------------------------

def test_a_check_says_why_in_one_style():
    from ctxbench.core.part import Check

    assert Check(ge=1).problem(0) == "must be >= 1" and Check(ge=1).problem(1) is None
    assert Check(gt=0).problem(0) == "must be > 0" and Check(gt=0).problem(1e-12) is None
    assert Check(le=1).problem(1.5) == "must be <= 1" and Check(lt=1).problem(1) == "must be < 1"
    assert Check(gt=0, le=1).problem(0) == "must lie in (0, 1]" and Check(gt=0, le=1).problem(1) is None
    assert Check(ge=0, lt=1).problem(1.0) == "must lie in [0, 1)"
    assert Check(ge=0.5).problem(0.25) == "must be >= 0.5"
    assert Check(ge=0).problem(float("nan")) == "must be >= 0"  # NaN is never in range
    assert Check(ge=0).problem(True) == "must be a number" and Check(ge=0).problem("3") == "must be a number"
    assert Check(choices=("a", None)).problem("b") == "expected one of a, null"
    assert Check(choices=("a",)).problem(None) == "must be set"
    assert Check(ge=1, nullable=True).problem(None) is None
    # null allowed where it is one of the choices, though not the default (bm25's stopwords)
    from ctxbench.core.part import CHECK, param

    assert param("en", choices=(None, "en")).metadata[CHECK].problem(None) is None
    assert param("en", choices=("en", "fr")).metadata[CHECK].problem(None) == "must be set"


def _checked_classes():
    from ctxbench.core.part import param

    seen = []

    @dataclass
    class Base(Part):
        k: int = param(1, ge=1)
        how: str = param("a", choices=("a", "b"))

        def __post_init__(self):
            seen.append(("base", self.k))  # runs only on fields already in range

    @dataclass
    class NoSuper(Base):
        limit: Optional[int] = param(None, gt=0)

        def __post_init__(self):  # forgets super().__post_init__(): the declared checks still run
            seen.append(("nosuper", self.limit))

    @dataclass
    class Plain(Part):  # no __post_init__ of its own
        r: float = param(0.5, ge=0, le=1)

    return Base, NoSuper, Plain, seen


def test_declared_checks_run_when_a_part_is_built_before_its_own_post_init():
    Base, NoSuper, Plain, seen = _checked_classes()
    Base(k=2)
    assert seen == [("base", 2)]
    for cls, bad, message in ((Base, dict(k=0), "k=0: must be >= 1"),
                              (Base, dict(how="c"), "how='c': expected one of a, b"),
                              (Base, dict(k=1.5), "k=1.5: must be an integer"),
                              (NoSuper, dict(limit=0), "limit=0: must be > 0"),
                              (NoSuper, dict(k=-3), "k=-3: must be >= 1"),
                              (Plain, dict(r=2.0), "r=2.0: must lie in [0, 1]")):
        with pytest.raises(ConfigError) as err:
            cls(**bad)
        assert str(err.value) == message
    assert seen == [("base", 2)]  # no refused part ran its own __post_init__
    NoSuper(limit=None)
    Plain(r=1.0)
    assert seen[-1] == ("nosuper", None)


def _part_classes():
    """Every class a conf/ option names, and the part classes nested in them (dataclass fields typed as parts)."""
    from hydra.utils import get_class

    from ctxbench.models.embedder import Embedder
    from ctxbench.core.part import find_targets
    from ctxbench.retrievers.ann import IndexSettings

    classes = {get_class(t) for t in find_targets(CONF).values()} | {Embedder, IndexSettings}
    return sorted((c for c in classes if dataclasses.is_dataclass(c)), key=lambda c: f"{c.__module__}.{c.__name__}")


def _outside(check):
    """Values just outside each bound and choice of a check, with the message each gets."""
    from ctxbench.core.part import Check

    out = []
    if check.choices is not None:
        out.append(("not-an-option", check.problem("not-an-option")))
    for bound, step in ((check.ge, -1), (check.gt, 0), (check.le, 1), (check.lt, 0)):
        if bound is not None:
            value = bound + step if float(bound).is_integer() else bound + step * 0.5
            out.append((value, check.problem(value)))
    assert all(problem for _, problem in out), (check, out)
    assert isinstance(check, Check)
    return out


def test_every_declared_bound_of_every_part_refuses_the_value_just_outside_and_keeps_its_default():
    from ctxbench.core.part import CHECK, check_params

    checked = 0
    for cls in _part_classes():
        fields = dataclasses.fields(cls)
        defaults = {f.name: f.default if f.default is not dataclasses.MISSING else
                    f.default_factory() if f.default_factory is not dataclasses.MISSING else None for f in fields}
        for f in fields:
            check = f.metadata.get(CHECK)
            if check is None:
                continue
            # the default passes its own check (a required field has none: it is not checked here)
            if f.default is not dataclasses.MISSING:
                assert check.problem(f.default) is None, (cls, f.name, f.default)
            for value, problem in _outside(check):
                part = object.__new__(cls)
                for name, v in {**defaults, f.name: value}.items():
                    object.__setattr__(part, name, v)
                with pytest.raises(ConfigError) as err:
                    check_params(part)
                assert str(err.value) == f"{f.name}={value!r}: {problem}", cls
                checked += 1
    assert checked >= 40  # the declarations are there (about 50 bounds and choices over the parts)


def test_a_bad_value_on_the_command_line_is_one_line_naming_the_key():
    from ctxbench.attribution.base import Attributor
    from ctxbench.datasets.base import Dataset
    from ctxbench.core.part import build, build_all

    cfg = compose_stage("run", "attribution=[ifr_multi_hop,attention]", "attribution.ifr_multi_hop.hops=-1",
                        "length=0")
    with pytest.raises(ConfigError) as err:
        build_all(cfg.attribution, "attribution", Attributor)
    assert str(err.value) == "attribution.ifr_multi_hop: hops=-1: must be >= 0"
    with pytest.raises(ConfigError) as err:  # a config error, not an unknown dataset
        build(cfg.dataset, "dataset", Dataset)
    assert str(err.value) == "dataset: length=0: must lie in [1, 131072]"  # RULER's longest standard length


def test_a_stage_checks_its_own_settings_as_declared_before_it_loads_anything(tmp_path):
    from ctxbench.stages.conf import RunConfig, SampleConfig
    from ctxbench.core.part import check_stage_config
    from ctxbench.stages.run import run_stage

    with pytest.raises(ConfigError) as err:
        run_stage(compose_stage("run", "shard.count=0", f"paths.root={tmp_path}"), tmp_path / "job")
    assert str(err.value) == "shard.count=0: must be >= 1" and not (tmp_path / "job").exists()
    with pytest.raises(ConfigError) as err:
        check_stage_config(compose_stage("sample", "chunk=0"), SampleConfig)
    assert str(err.value) == "chunk=0: must be >= 1"
    for override, message in (("max_examples=0", "max_examples=0: must be >= 1"),
                              ("prompt_format=chat", "prompt_format='chat': expected one of table1, bare"),
                              ("heatmaps=-1", "heatmaps=-1: must be >= 0"), ("length=0", "length=0: must be >= 1")):
        with pytest.raises(ConfigError) as err:
            check_stage_config(compose_stage("run", override), RunConfig)
        assert str(err.value) == message
    check_stage_config(compose_stage("run"), RunConfig)  # the defaults pass
    check_stage_config(compose_stage("sample"), SampleConfig)
