"""One tie rule for every dense option (docs/retrievers.md): equal scores are ordered by pool index, in the dense
retriever's hits and in the candidate lists DPP and MDL choose from, wherever Faiss puts equal scores and wherever a
tie meets the cut. Pools with exact duplicate embeddings (a stand-in embedder returns fixed vectors; no model loads)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from ctxbench.models.embedder import Embedder
from ctxbench.retrievers.dense import DenseRetriever
from ctxbench.retrievers.dpp import DPPRetriever

DIM = 8


@dataclass
class FixedEmbedder(Embedder):
    """The vector of each text from ``vectors`` (text -> list of floats)."""

    vectors: dict = field(default_factory=dict)

    def encode_corpus(self, texts):
        return np.asarray([self.vectors[t] for t in texts], dtype=np.float32)

    encode_queries = encode_corpus


def _pool(n: int, duplicates: list[int], seed: int = 0):
    """``n`` rows with random unit vectors, except the rows at ``duplicates``, which share one vector; and a query
    with that vector (the duplicates are its nearest rows, all at the same score)."""
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(n, DIM))
    shared = rng.normal(size=DIM)
    vecs[duplicates] = shared
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    rows = [{"id": f"r{i}", "text": f"row {i}"} for i in range(n)]
    vectors = {r["text"]: v.tolist() for r, v in zip(rows, vecs)}
    vectors["the query"] = (shared / np.linalg.norm(shared)).tolist()
    return rows, vectors


def _brute_force(vectors: dict, n: int, query: str, exclude: int | None = None) -> list[int]:
    q = np.asarray(vectors[query], np.float32)
    scores = [float(np.asarray(vectors[f"row {i}"], np.float32) @ q) for i in range(n)]
    return sorted((i for i in range(n) if i != exclude), key=lambda i: (-scores[i], i))


DUPLICATES = [37, 3, 25, 11, 30]  # five rows at the top score, listed out of order


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7])
def test_dense_orders_equal_scores_by_pool_index_wherever_the_cut_falls(k):
    rows, vectors = _pool(40, DUPLICATES)
    r = DenseRetriever(ice_num=k, embedder=FixedEmbedder(vectors=vectors), fields=["text"]).fit(rows)
    (hits,) = r.retrieve([{"id": "q", "text": "the query"}])
    assert hits.indices == _brute_force(vectors, 40, "the query")[:k]
    assert hits.indices[:min(k, 5)] == sorted(DUPLICATES)[:k]  # the tied rows, lowest indices first
    assert len(set(hits.scores[:min(k, 5)])) == 1


def test_the_own_row_is_left_out_and_the_next_tied_row_takes_its_place():
    rows, vectors = _pool(40, DUPLICATES)
    rows[3]["id"] = "q"  # the query is pool row 3
    r = DenseRetriever(ice_num=2, embedder=FixedEmbedder(vectors=vectors), fields=["text"], exclude_self=True)
    (hits,) = r.fit(rows).retrieve([{"id": "q", "text": "the query"}])
    assert hits.indices == [11, 25] == _brute_force(vectors, 40, "the query", exclude=3)[:2]


def test_ranked_hits_widen_the_search_until_the_tie_is_whole():
    rows, vectors = _pool(200, list(range(150, 200)))  # 50 tied rows at the end of the pool
    r = DenseRetriever(ice_num=1, embedder=FixedEmbedder(vectors=vectors), fields=["text"]).fit(rows)
    q = {"id": "q", "text": "the query"}
    (hits,) = r.ranked_hits([q], r.embed_queries([q]), 3, need=3)
    assert [i for _, i in hits] == [150, 151, 152]


def test_dpp_and_mdl_take_their_candidates_in_the_tie_rule_order(monkeypatch):
    """Faiss returns equal scores highest index first; the candidate lists must not. DPP's first pick (the
    best-ranked candidate, ties to the earlier one) and MDL's first candidate set (the top k) are the lowest-indexed
    tied rows."""
    from ctxbench.retrievers import mdl as mdl_module
    from ctxbench.retrievers.mdl import MDLRetriever

    rows, vectors = _pool(40, DUPLICATES)
    q = {"id": "q", "text": "the query"}
    dpp = DPPRetriever(ice_num=1, candidate_num=3, embedder=FixedEmbedder(vectors=vectors), fields=["text"])
    assert dpp.fit(rows).retrieve([q])[0].indices == [3]
    seen = []
    monkeypatch.setattr(MDLRetriever, "_lm", lambda self: (None, None))
    monkeypatch.setattr(mdl_module, "label_nll", lambda *args, **kwargs: np.zeros(2))
    monkeypatch.setattr(MDLRetriever, "candidate_sets",
                        lambda self, query, cands, k: seen.append(cands) or [cands[:k]])
    mdl = MDLRetriever(ice_num=2, candidate_num=4, labels=["a", "b"], embedder=FixedEmbedder(vectors=vectors),
                       fields=["text"])
    assert mdl.fit(rows).retrieve([q])[0].indices == [3, 11]
    assert seen == [[3, 11, 25, 30]]
