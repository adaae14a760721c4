"""Search: Faiss against brute-force numpy top-k, grouped search against one fit per group, identical ids dropped
without losing a hit; the stage's search results reused only under the same settings, refused otherwise, recomputed
with overwrite; reranking with a test reranker."""

import json
import zlib
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from ctxbench.core.errors import ConfigError
from ctxbench.models.embedder import Embedder
from ctxbench.rerankers.base import Reranker
from ctxbench.retrieval.data import RetrievalSplit
from ctxbench.retrieval.search import rerank, search
from ctxbench.retrievers.dense import DenseRetriever

from helpers.configs import compose_stage, plugin_option
from helpers.retrieval import tiny_beir_folder


@dataclass
class HashEmbedder(Embedder):
    """Unit vectors drawn from a generator seeded by the text (no model)."""

    dim_: int = 16

    def encode(self, texts, max_length):
        out = np.empty((len(texts), self.dim_), dtype=np.float32)
        for i, t in enumerate(texts):
            v = np.random.default_rng(zlib.crc32(t.encode())).standard_normal(self.dim_)
            out[i] = v / np.linalg.norm(v)
        return out


def split_of(n_docs, n_queries, groups=None):
    corpus = [{"id": f"d{i}", "title": "", "text": f"document {i}"} for i in range(n_docs)]
    queries = [{"id": f"q{i}", "text": f"query {i}"} for i in range(n_queries)]
    return RetrievalSplit("toy", "test", corpus, queries, {}, groups=groups)


def test_faiss_search_equals_numpy_top_k():
    split = split_of(200, 30)
    retriever = DenseRetriever(embedder=HashEmbedder(), ice_num=1)
    run = search(retriever, split, top_k=25)
    emb = HashEmbedder()
    d = emb.encode([r["text"] for r in split.corpus], 0)
    q = emb.encode([r["text"] for r in split.queries], 0)
    scores = q.astype(np.float64) @ d.astype(np.float64).T
    for i, query in enumerate(split.queries):
        top = np.argsort(-scores[i], kind="stable")[:25]
        got = [int(d[1:]) for d in run[query["id"]]]
        # Faiss sums in float32: ids may swap only within a near-tie, so rank by rank the true scores agree
        np.testing.assert_allclose(scores[i, got], scores[i, top], atol=1e-5)
        assert len(set(got)) == 25 and sum(a != b for a, b in zip(got, top)) <= 2
        np.testing.assert_allclose(list(run[query["id"]].values()), scores[i, got], atol=1e-5)


def test_grouped_search_equals_one_fit_per_group():
    groups = [(list(range(0, 12)), [0, 1]), (list(range(12, 20)), [2]), (list(range(20, 50)), [3, 4, 5])]
    split = split_of(50, 6, groups)
    run = search(DenseRetriever(embedder=HashEmbedder()), split, top_k=10)
    for docs, qs in groups:
        alone = split_of(0, 0)
        alone.corpus = [split.corpus[i] for i in docs]
        alone.queries = [split.queries[j] for j in qs]
        expected = search(DenseRetriever(embedder=HashEmbedder()), alone, top_k=10)
        for qid, hits in expected.items():
            assert list(run[qid]) == list(hits) and len(hits) == min(10, len(docs))
            assert all(h in {split.corpus[i]["id"] for i in docs} for h in run[qid])


def test_ignore_identical_ids_refills_to_k():
    split = split_of(20, 0)
    split.queries = [{"id": f"d{i}", "text": f"document {i}"} for i in range(5)]  # each query is also a document
    kept = search(DenseRetriever(embedder=HashEmbedder()), split, top_k=4)
    dropped = search(DenseRetriever(embedder=HashEmbedder()), split, top_k=4, ignore_identical_ids=True)
    for qid in kept:
        assert list(kept[qid])[0] == qid  # its own text ranks first
        assert qid not in dropped[qid] and len(dropped[qid]) == 4
        assert list(dropped[qid]) == [d for d in search(DenseRetriever(embedder=HashEmbedder()), split, top_k=5)[qid]
                                      if d != qid][:4]


@dataclass
class KeywordReranker(Reranker):
    """Test reranker: ``weight`` x the number of query words found in the document."""

    weight: float = 1.0
    calls: ClassVar[int] = 0

    @property
    def name(self):
        return "keyword"

    def score(self, pairs):
        type(self).calls += 1
        return np.array([self.weight * sum(w in d.split() for w in q.split()) for q, d in pairs], dtype=np.float64)


def test_rerank_scores_only_the_top_hits():
    split = split_of(6, 1)
    split.queries = [{"id": "q", "text": "document 3 5"}]
    run = {"q": {"d0": 0.9, "d3": 0.8, "d5": 0.7, "d1": 0.1}}
    out = rerank(KeywordReranker(weight=2.0), split, run, top_n=3)
    assert out == {"q": {"d0": 2.0, "d3": 4.0, "d5": 4.0}}


# --- the stage: reuse, refusal, overwrite ---------------------------------------------------------------------------

def cfg_for(tmp_path, *overrides):
    search_path = plugin_option(tmp_path, "reranker", "keyword",
                                "_target_: test_retrieval_search.KeywordReranker\nweight: 1.0\n")
    data = tmp_path / "data" if (tmp_path / "data").exists() else tiny_beir_folder(tmp_path)
    return compose_stage("run", search_path, f"paths.root={tmp_path}", f"paths.model_cache_dir={tmp_path / 'cache'}",
                         "mode=retrieval", "dataset=beir", f"dataset.path={data}", "retriever=bm25",
                         "mode.retrieval.k_values=[1,3]", "mode.retrieval.eval_metrics=[ndcg_at_3,mrr_at_1]",
                         *overrides)


def test_stage_reuses_refuses_and_overwrites(tmp_path, monkeypatch):
    from ctxbench.stages import retrieval as stage
    from ctxbench.stages.run import run_stage

    calls = []
    monkeypatch.setattr(KeywordReranker, "calls", 0)
    monkeypatch.setattr("ctxbench.models.load_causal_lm", no_lm)  # bm25 and this reranker need no causal LM
    real = stage.search
    monkeypatch.setattr(stage, "search", lambda *a, **k: calls.append(1) or real(*a, **k))
    out = tmp_path / "job"
    first = run_stage(cfg_for(tmp_path, "reranker=keyword"), out)
    assert len(calls) == 1 and KeywordReranker.calls == 1
    files = sorted(p.relative_to(out / "search_results").as_posix() for p in (out / "search_results").rglob("*.json"))
    assert files == ["bm25/NoReranker/beir-test.json", "bm25/keyword/beir-test.json"]
    stored = json.loads((out / "search_results/bm25/keyword/beir-test.json").read_text())
    assert {"eval_name", "model_name", "reranker_name", "split", "dataset_name", "search_results", "settings"} <= \
        set(stored) and stored["settings"]["reranker"] == {"_target_": "test_retrieval_search.KeywordReranker",
                                                     "weight": 1.0}
    by = {e["reranker"]: e["metrics"] for e in first["results"]}
    assert by["NoReranker"]["mrr_at_1"] == 1.0  # bm25 ranks each query's article first
    # the same settings: nothing searched or reranked again, the same figures
    again = run_stage(cfg_for(tmp_path, "reranker=keyword"), out)
    assert len(calls) == 1 and KeywordReranker.calls == 1 and again["results"] == first["results"]
    # a setting that changes results is refused, naming it; nothing is overwritten
    before = (out / "search_results/bm25/NoReranker/beir-test.json").read_bytes()
    with pytest.raises(ConfigError, match=r"other settings \(retriever.k1: 1.5 -> 1.2\)"):
        run_stage(cfg_for(tmp_path, "retriever.k1=1.2"), out)
    with pytest.raises(ConfigError, match=r"reranker.weight: 1.0 -> 2.0"):
        run_stage(cfg_for(tmp_path, "reranker=keyword", "reranker.weight=2.0"), out)
    assert (out / "search_results/bm25/NoReranker/beir-test.json").read_bytes() == before
    # overwrite recomputes
    run_stage(cfg_for(tmp_path, "retriever.k1=1.2", "mode.retrieval.overwrite=true"), out)
    assert len(calls) == 2
    assert json.loads((out / "search_results/bm25/NoReranker/beir-test.json").read_text())["settings"][
        "retriever"]["k1"] == 1.2
    md = (out / "retrieval.md").read_text()
    assert "## NDCG@3 (ndcg_at_3, x100)" in md and "| Model | Reranker | average | beir-test |" in md


def no_lm(*a, **k):
    raise AssertionError("the causal LM was loaded for a run that does not use it")


@dataclass
class LMReranker(KeywordReranker):
    """A reranker that uses the model group's causal LM: the stage must load it and hand it over first."""

    needs_lm: ClassVar[bool] = True
    bound: ClassVar[list] = []

    def use_lm(self, loaded_lm):
        type(self).bound.append(loaded_lm)


def test_stage_loads_the_lm_only_for_a_reranker_that_needs_it(tmp_path, monkeypatch):
    from ctxbench.stages.run import run_stage

    sentinel = object()
    monkeypatch.setattr("ctxbench.models.load_causal_lm", lambda *a, **k: sentinel)
    cfg_for(tmp_path)  # writes the data folder and the search-path config folder
    search_path = plugin_option(tmp_path, "reranker", "lm", "_target_: test_retrieval_search.LMReranker\n")
    cfg = compose_stage("run", search_path, f"paths.root={tmp_path}", "mode=retrieval", "dataset=beir",
                        f"dataset.path={tmp_path / 'data'}", "retriever=bm25", "reranker=lm")
    result = run_stage(cfg, tmp_path / "job")
    assert LMReranker.bound == [sentinel] and {e["reranker"] for e in result["results"]} == {"NoReranker", "keyword"}


def test_stage_refuses_a_mix_of_modes_and_a_missing_retriever(tmp_path):
    from ctxbench.stages.run import run_stage

    with pytest.raises(ConfigError, match="run it in a job of its own"):
        run_stage(cfg_for(tmp_path, "mode=[retrieval,recovery]"), tmp_path / "job")
    with pytest.raises(ConfigError, match="mode=retrieval evaluates a retriever"):
        run_stage(cfg_for(tmp_path, "~retriever"), tmp_path / "job")
