"""sample_and_filter end to end: replayed answers through parsing, judging, spans and the cache (funnel, resume,
settings refusal, shards + merge), a kill mid-run, and (slow) SmolLM2 sampling RULER rows that run_exp then explains."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from ctxbench.core.errors import ConfigError, DataError
from ctxbench.evaluation import example_spans
from ctxbench.example import read_examples
from ctxbench.sampling.cache import log_path, shard_path
from ctxbench.stages.sample import sample_stage

from helpers.cli import run_script, start_script
from helpers.configs import compose_stage, morehopqa_rows, plugin_module, plugin_option, replay_file, sample_cfg
from helpers.paths import CACHE_DIR, CONF

ROWS = morehopqa_rows()


def _ids(path):
    return [e.example_id for e in read_examples(path)]


def test_replayed_answers_are_parsed_judged_and_cached(tmp_path, smol_tokenizer):
    cfg = sample_cfg(tmp_path, "max_examples=null")
    # only the 9 replayed rows are answered; the others come back as generation errors
    out = sample_stage(cfg, tmp_path / "job")
    cache = tmp_path / "samples" / "morehopqa.jsonl"
    assert out["cache"] == str(cache)
    assert _ids(cache) == [ROWS[i]["_id"] for i in (0, 3, 6)]
    assert out["processed"] == 150 and out["generated"] == 9 and out["well_formed"] == 6
    assert out["judged_correct"] == 3 and out["kept"] == 3
    assert out["rejections"] == {"generation_error": 141, "judged_wrong": 3, "no_box": 3}
    assert json.loads((tmp_path / "job" / "funnel.json").read_text())["kept"] == 3
    ex = next(read_examples(cache, tokenizer=smol_tokenizer))
    md = ex.metadata
    assert ex.target.endswith("\nThe answer is " + ROWS[0]["answer"] + ".")
    assert md["reference_answer"] == ROWS[0]["answer"]
    assert len(md["retrieved_ids"]) == 4 and all(r.startswith("box-") for r in md["retrieved_ids"])
    assert "<|im_start|>" in md["generation_prompt"] and md["judge_response"]
    # the spans decode to the boxed sentence and run_exp reads them back as they are
    ids = smol_tokenizer(ex.target, add_special_tokens=False)["input_ids"]
    assert smol_tokenizer.decode(ids[ex.sink_span[0]:ex.sink_span[1] + 1]).strip() == md["boxed_answer"]
    assert example_spans(ex, smol_tokenizer) == (ex.sink_span, ex.thinking_span, "cached")
    log = [json.loads(line) for line in log_path(cache).read_text().splitlines()]
    assert len(log) == 151 and log[-1] == {"done": True}
    assert log[1]["status"] == "malformed" and log[1]["reason"] == "no_box" and log[1]["prompt"]["messages"]
    # every row carries its share of the stage's wall time; the funnel sums them
    assert all(x["seconds"] >= 0 for x in log[:-1])
    assert out["timed_rows"] == 150 and out["seconds"] == pytest.approx(sum(x["seconds"] for x in log[:-1]), abs=1e-3)
    # a rerun processes nothing again
    before = cache.read_bytes(), log_path(cache).read_bytes()
    assert sample_stage(cfg, tmp_path / "job2")["kept"] == 3
    assert (cache.read_bytes(), log_path(cache).read_bytes()) == before
    # another retriever never appends to this cache
    with pytest.raises(DataError, match=r"made with other settings \(retriever"):
        sample_stage(sample_cfg(tmp_path, "retriever=fixk"), tmp_path / "job3")


def test_max_examples_and_shards_merge_to_the_unsharded_run(tmp_path):
    full = tmp_path / "full"
    sample_stage(sample_cfg(full, "max_examples=2"), full / "job")
    expected = (full / "samples" / "morehopqa.jsonl").read_bytes()
    assert _ids(full / "samples" / "morehopqa.jsonl") == [ROWS[0]["_id"], ROWS[3]["_id"]]
    sharded = tmp_path / "sharded"
    cache = sharded / "samples" / "morehopqa.jsonl"
    for i in range(3):
        sample_stage(sample_cfg(sharded, "max_examples=2", f"shard.index={i}", "shard.count=3"), sharded / f"job{i}")
        assert shard_path(cache, i, 3).exists()
    # a missing shard and an unfinished one are refused
    with pytest.raises(DataError, match="shard 0 of 4 is missing"):
        sample_stage(sample_cfg(sharded, "max_examples=2", "shard.count=4", "merge=true"), sharded / "m0")
    log2 = log_path(shard_path(cache, 2, 3))
    full_log = log2.read_text()
    log2.write_text("".join(line + "\n" for line in full_log.splitlines()[:-1]))  # as if killed before the end
    with pytest.raises(DataError, match="shard 2 of 3 is unfinished"):
        sample_stage(sample_cfg(sharded, "max_examples=2", "shard.count=3", "merge=true"), sharded / "m1")
    assert not cache.exists()
    log2.write_text(full_log)
    out = sample_stage(sample_cfg(sharded, "max_examples=2", "shard.count=3", "merge=true"), sharded / "merge")
    assert cache.read_bytes() == expected and out["kept"] == 2
    with pytest.raises(DataError, match="exists already"):
        sample_stage(sample_cfg(sharded, "max_examples=2", "shard.count=3", "merge=true"), sharded / "m2")


def test_max_rows_is_a_budget_a_rerun_may_raise(tmp_path):
    out = sample_stage(sample_cfg(tmp_path, "max_rows=5"), tmp_path / "job1")
    assert out["processed"] == 5 and out["kept"] == 2  # rows 0 and 3 of the first five
    out = sample_stage(sample_cfg(tmp_path, "max_rows=7"), tmp_path / "job2")  # resumes: rows 5 and 6 only
    log = [json.loads(line) for line in log_path(tmp_path / "samples" / "morehopqa.jsonl").read_text().splitlines()]
    assert [x["id"] for x in log if "id" in x] == [r["_id"] for r in ROWS[:7]]
    assert out["processed"] == 7
    assert _ids(tmp_path / "samples" / "morehopqa.jsonl") == [ROWS[i]["_id"] for i in (0, 3, 6)]
    with pytest.raises(ConfigError, match="max_rows=0"):
        sample_stage(sample_cfg(tmp_path, "max_rows=0"), tmp_path / "job3")


def test_overlapping_shards_are_refused(tmp_path):
    root = tmp_path / "ov"
    for i in range(2):
        sample_stage(sample_cfg(root, f"shard.index={i}", "shard.count=2"), root / f"job{i}")
    cache = root / "samples" / "morehopqa.jsonl"
    a, b = shard_path(cache, 0, 2), shard_path(cache, 1, 2)
    b.write_text(b.read_text() + a.read_text().splitlines()[0] + "\n")  # an example of shard 0 also in shard 1
    with pytest.raises(DataError, match="is in two shards"):
        sample_stage(sample_cfg(root, "shard.count=2", "merge=true"), root / "merge")


SLOW_GENERATOR = '''
import time
from dataclasses import dataclass
from ctxbench.generators.replay import ReplayGenerator

@dataclass
class SlowReplay(ReplayGenerator):
    """Replay, slowed down so that a test can kill the stage mid-run."""
    delay: float = 0.1

    def generate(self, requests):
        time.sleep(self.delay * len(requests))
        return super().generate(requests)
'''


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_resume_after_a_kill(tmp_path, sig):
    plug = plugin_module(tmp_path, "slow_replay", SLOW_GENERATOR)
    search_path = plugin_option(tmp_path, "generator", "slow",
                                f"_target_: slow_replay.SlowReplay\npath: {replay_file(tmp_path, 9)}\n")
    cache = tmp_path / "samples" / "morehopqa.jsonl"
    args = [f"paths.model_cache_dir={CACHE_DIR}", f"paths.samples_dir={tmp_path / 'samples'}", search_path,
            "generator=slow", "chunk=1", "progress=false", "dataset.name=morehopqa"]
    proc = start_script("sample_and_filter.py", *args, f"hydra.run.dir={tmp_path / 'run1'}", cwd=tmp_path,
                        pythonpath=plug, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:  # wait until some rows are processed, then kill mid-run
        if log_path(cache).exists() and len(log_path(cache).read_text().splitlines()) >= 8:
            break
        time.sleep(0.2)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    done_before = len(log_path(cache).read_text().splitlines())
    assert 8 <= done_before < 150
    out = run_script("sample_and_filter.py", *args, f"hydra.run.dir={tmp_path / 'run2'}", cwd=tmp_path,
                     pythonpath=plug)
    assert out.returncode == 0, out.stderr[-2000:]
    log = [json.loads(line) for line in log_path(cache).read_text().splitlines()]
    ids = [x["id"] for x in log if "id" in x]
    assert len(ids) == len(set(ids)) == 150 and log[-1] == {"done": True}  # every row once, none lost
    assert _ids(cache) == [ROWS[i]["_id"] for i in (0, 3, 6)]  # no duplicate, no partial line


def test_run_exp_refuses_a_cache_made_at_another_length_before_any_model_loads(tmp_path, monkeypatch):
    """The README's trap: after sampling niah_single_1 at 512 tokens, run_exp at 1,024 must not explain the
    512-token cache; it is refused (naming the cache and the length it was made at) before the model loads and before
    anything is written; at 512 the cache is read."""
    from ctxbench.stages import run

    common = [f"paths.root={tmp_path}", f"paths.model_cache_dir={CACHE_DIR}", "dataset=niah_single_1",
              "dataset.num_samples=2", "progress=false"]
    cfg = compose_stage("sample", *common, "length=512", "generator=evidence_cot", "retriever=zero")
    assert sample_stage(cfg, tmp_path / "sample")["kept"] == 2
    cache = tmp_path / "exp" / "exp2" / "data" / "niah_single_1.jsonl"

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(run, "load_causal_lm", no_model)

    def run_cfg(length):
        return compose_stage("run", *common, f"length={length}", "attribution=[random]", "mode=[recovery]",
                             "dry_run=true")

    with pytest.raises(DataError) as err:
        run.run_stage(run_cfg(1024), tmp_path / "run1024")
    assert str(err.value).startswith(f"{cache}: this sampled cache would stand in for dataset niah_single_1, but it "
                                     f"was made from other data or for another model: dataset.length=512 (asked: "
                                     f"1024);")
    assert not (tmp_path / "run1024").exists()
    assert not (tmp_path / "data" / "ruler_multihop" / "1024").exists()  # refused before the raw data was made
    run.run_stage(run_cfg(512), tmp_path / "run512")
    manifest = json.loads((tmp_path / "run512" / "manifest.json").read_text())
    assert (manifest["dataset"]["kind"], manifest["dataset"]["examples"]) == ("cache", 2)


@pytest.mark.slow
def test_smollm2_through_the_stage_and_run_exp_on_a_cache(tmp_path):
    """The two-stage flow on 4 RULER rows. SmolLM2 generates through the stage (its rows are counted, logged and
    judged; the hf option opens the box when it would stop without one, see the README), then replayed
    chain-of-thought answers make the cache that run_exp explains with SmolLM2: spans cached, a thinking span to hop
    through."""
    common = [f"paths.root={tmp_path}", f"paths.model_cache_dir={CACHE_DIR}", f"paths.data_dir={tmp_path / 'data'}",
              "dataset=niah_single_1", "length=512", "dataset.num_samples=4", "progress=false"]
    cfg = compose_stage("sample", *common, f"paths.samples_dir={tmp_path / 'hf'}", "generator.max_new_tokens=48",
                        "generator.batch_size=4")
    out = sample_stage(cfg, tmp_path / "sample_hf")
    print("\nSmolLM2 funnel (niah_single_1, 4 rows):", json.dumps(out))
    assert out["processed"] == 4 and out["generated"] == 4
    assert out["kept"] + sum(out["rejections"].values()) == 4  # every row kept or rejected for a counted reason
    log = [json.loads(line) for line in log_path(tmp_path / "hf" / "niah_single_1.jsonl").read_text().splitlines()]
    assert all(x["generation"]["text"] for x in log if "id" in x)  # real text was generated for every row

    from ctxbench.datasets import Paths, RulerTask

    _, rows = RulerTask(name="niah_single_1", length=512, num_samples=4).load(Paths(data_dir=str(tmp_path / "data")))
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": r.example_id, "response": (
        "The text hides one special magic number for the key in the question, and I look for the sentence naming "
        "that key. \\box{The special magic number is " + r.metadata["outputs"][0] + ".}")}) + "\n" for r in rows))
    cfg = compose_stage("sample", *common, f"paths.samples_dir={tmp_path / 'samples'}", "generator=replay",
                        f"generator.path={answers}")
    out = sample_stage(cfg, tmp_path / "sample")
    assert out["kept"] == 4, out
    from ctxbench.stages.run import run_stage

    run_cfg = compose_stage("run", *common, f"paths.samples_dir={tmp_path / 'samples'}", "views=[seq]",
                            "attribution=[ifr_multi_hop,random]", "mode=[faithfulness,recovery]",
                            "mode.faithfulness.steps=4", "heatmaps=0", "max_examples=4")
    summary = run_stage(run_cfg, tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["dataset"]["kind"] == "cache"
    assert manifest["dataset"]["path"] == "samples/niah_single_1.jsonl"  # relative to paths.root (tmp_path)
    assert summary["ifr_multi_hop"]["examples"] == 4
    rec = json.loads((tmp_path / "run" / "results.jsonl").read_text().splitlines()[0])
    assert rec["spans"] == "cached" and rec["thinking_span"] is not None  # a chain of thought to hop through
    ifr, rnd = (summary[m]["recovery"]["seq"]["recall"]["mean"] for m in ("ifr_multi_hop", "random"))
    assert ifr > rnd, "multi-hop IFR through the chain of thought should find the needle better than chance"


@pytest.mark.slow
def test_a_multirun_over_dataset_model_and_retriever_writes_one_cache_per_combination(tmp_path):
    """The README's sweep: ``-m dataset=a,b model=x,y retriever=u,v`` with ``paths.samples_dir`` keyed by the model and
    retriever choices. Each of the 8 jobs writes its own cache with its own settings record; none is refused for another
    combination's settings. (Only SmolLM2 is offline: the second model is a config of the same weights in float64.)"""
    search_path = plugin_option(tmp_path, "model", "smollm2-f64", (CONF / "model" / "smollm2-135m.yaml").read_text()
                                .replace("name: smollm2-135m", "name: smollm2-f64")
                                .replace("dtype: auto", "dtype: float64"))
    samples = tmp_path / "samples"
    out = run_script(
        "sample_and_filter.py", "-m", search_path, f"hydra.sweep.dir={tmp_path / 'multirun'}",
        f"paths.model_cache_dir={CACHE_DIR}", f"paths.data_dir={tmp_path / 'data'}",
        f"paths.samples_dir={samples}/" + "${hydra:runtime.choices.model}/${hydra:runtime.choices.retriever}",
        "dataset=morehopqa,niah_single_1", "model=smollm2-135m,smollm2-f64", "retriever=bm25,random",
        "length=512", "max_examples=2", "generator=replay", f"generator.path={replay_file(tmp_path, 9)}",
        "progress=false", cwd=tmp_path, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    for model in ("smollm2-135m", "smollm2-f64"):
        for retriever in ("bm25", "random"):
            for dataset in ("morehopqa", "niah_single_1"):
                cache = samples / model / retriever / f"{dataset}.jsonl"
                settings = json.loads((cache.parent / f"{dataset}.jsonl.config.json").read_text())
                assert settings["model"]["name"] == model and settings["dataset"]["name"] == dataset
                assert settings["retriever"]["_target_"].rsplit(".", 1)[-1] == {
                    "bm25": "BM25Retriever", "random": "RandomRetriever"}[retriever]
            # the replayed answers cover MoreHopQA only: rows 0 and 3 are kept, the RULER rows find no answer
            assert _ids(samples / model / retriever / "morehopqa.jsonl") == [ROWS[i]["_id"] for i in (0, 3)]
            assert _ids(samples / model / retriever / "niah_single_1.jsonl") == []
    assert len(list((tmp_path / "multirun").glob("*/funnel.json"))) == 8


def test_a_cache_recorded_before_a_setting_existed_reads_it_at_its_default(tmp_path):
    """The Table-1 caches were recorded before model.tokenizer and three BM25 settings existed: a rerun with those
    at their defaults (or unset) finds the same settings; a new setting away from its default, or a recorded one
    changed, is refused naming it."""
    from ctxbench.retrievers.bm25 import BM25Retriever
    from ctxbench.sampling.cache import check_config
    from ctxbench.core.cache_record import config_path

    now = json.loads(json.dumps({"model": {"name": "m", "tokenizer": None},
                                 "retriever": BM25Retriever(ice_num=4).settings()}, default=str))
    then = json.loads(json.dumps(now))
    del then["model"]["tokenizer"]
    for key in ("tokenizer", "epsilon", "ties"):
        del then["retriever"][key]
    cache = tmp_path / "t.jsonl"
    config_path(cache).write_text(json.dumps(then))
    check_config(cache, now)  # nothing refused, nothing rewritten
    assert json.loads(config_path(cache).read_text()) == then
    for changed, key in ((dict(now, retriever={**now["retriever"], "epsilon": 0.5}), "retriever.epsilon"),
                         (dict(now, model={**now["model"], "tokenizer": "gpt2"}), "model.tokenizer"),
                         (dict(now, retriever={**now["retriever"], "k1": 1.2}), "retriever.k1")):
        with pytest.raises(DataError, match=rf"made with other settings \({key}\)"):
            check_config(cache, changed)
