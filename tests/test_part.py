"""The shared part base (ctxbench.part): settings() leaves out the fields declared neutral and adds identity(), and the
same rule decides the run fingerprint, the report's consistency check, stored search results and sampled caches. A
retriever written outside the library with a neutral num_workers field runs through mode=retrieval, the sampling
stage and preview_prompts, and what it stored is reused when only num_workers changes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ctxbench.conf import register_configs
from ctxbench.errors import ConfigError, DataError
from ctxbench.part import Part, neutral, neutral_fields, settings_of, without_neutral

from conftest import CACHE_DIR, ROOT

register_configs()


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
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="run", overrides=[f"paths.root={ROOT}", f"paths.model_cache_dir={CACHE_DIR}",
                                                     *overrides])


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
    from ctxbench.reporting.aggregate import JobRun, check_consistent

    def job(**faith):
        node = {"_target_": "ctxbench.metrics.faithfulness.FaithfulnessScorer", "steps": 10, "batch_size": 4, **faith}
        return JobRun(Path("."), {"mode": {"faithfulness": node}, "seed": 0}, [], {})

    check_consistent([job(), job(batch_size=16)])  # a batch size does not change the figures
    with pytest.raises(ConfigError, match=r"not comparable: mode.faithfulness.steps \(10, 5\)"):
        check_consistent([job(), job(steps=5)])


# --- a retriever from outside the library ---------------------------------------------------------------------------

def plugin_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "conf" / "retriever"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "overlap.yaml").write_text("_target_: plugin_retriever.OverlapRetriever\nice_num: 2\nlowercase: true\n"
                                       "num_workers: 1\nfields: [prompt]\n")
    return tmp_path / "conf"


def test_a_plugin_retriever_through_retrieval_sampling_and_preview(tmp_path, monkeypatch):
    from plugin_retriever import OverlapRetriever

    from ctxbench.stages.preview import preview_stage
    from ctxbench.stages.run import run_stage
    from ctxbench.stages.sample import sample_stage
    from test_retrieval_search import folder
    from test_sample_stage import cfg_for as sample_cfg

    search_path = f"hydra.searchpath=[file://{plugin_conf(tmp_path)}]"
    monkeypatch.setattr(OverlapRetriever, "calls", 0)

    # mode=retrieval: searched once; a rerun with 4 workers reuses the stored results; another setting is refused
    def retrieval(*overrides):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose(config_name="run", overrides=[
                search_path, f"paths.root={tmp_path}", f"paths.model_cache_dir={CACHE_DIR}", "mode=retrieval",
                "dataset=beir", f"dataset.path={data}", "retriever=overlap", "retriever.fields=[text]",
                "mode.retrieval.k_values=[1,3]", "mode.retrieval.eval_metrics=[ndcg_at_3]", *overrides])
        return run_stage(cfg, tmp_path / "job")

    data = folder(tmp_path)
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
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        pcfg = compose(config_name="preview", overrides=[
            search_path, f"paths.root={tmp_path}", f"paths.model_cache_dir={CACHE_DIR}", "dataset=morehopqa",
            "retriever=overlap", "retriever.num_workers=2", "n=2", f"output={rows}"])
    assert preview_stage(pcfg, str(tmp_path))["rows"] == 2
    recs = [json.loads(line) for line in rows.read_text().splitlines()]
    assert all(len(r["retrieved"]) == 2 for r in recs)
