"""The Retriever contract on real text (the shipped pool, Wikipedia summaries): bounds errors, determinism, shards,
order, global random state, ice_num > pool; BM25 against brute-force Lucene scoring; DPP and vote-k selection rules;
MDL with a tiny causal LM. Dense retrieval against brute force (MiniLM) is in test_retrievers_dense.py (slow)."""

from __future__ import annotations

import hashlib
import math
import random as pyrandom
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.example import CachedExample
from ctxbench.models.embedder import Embedder
from ctxbench.retrievers.base import Retrieved, row_text, top_k
from ctxbench.retrievers.bm25 import BM25Retriever, bm25_tokenize
from ctxbench.retrievers.dpp import DPPRetriever, greedy_map_dpp
from ctxbench.retrievers.fixk import FixKRetriever
from ctxbench.retrievers.mdl import MDLRetriever, label_entropy, label_nll
from ctxbench.retrievers.pool import example_rows, load_pool
from ctxbench.retrievers.random import RandomRetriever
from ctxbench.retrievers.sliding_window import SlidingWindowRetriever
from ctxbench.retrievers.votek import VotekRetriever, votek_select
from ctxbench.retrievers.zero import ZeroRetriever

from helpers.paths import ROOT
from helpers.retrieval import pool_queries, wiki_corpus, wiki_queries
from helpers.tiny_models import random_llama


class HashEmbedder(Embedder):
    """A deterministic bag-of-words embedder (hashed unigrams, L2-normalised) for fast tests of the dense-family logic
    on real text; the real encoder is tested in test_embedder.py / test_retrievers_dense.py."""

    DIM = 256

    def load(self):
        return self

    @property
    def dim(self) -> int:
        return self.DIM

    def encode(self, texts, max_length):
        out = np.zeros((len(texts), self.DIM), dtype=np.float32)
        for r, t in enumerate(texts):
            for tok in t.lower().split():
                h = int.from_bytes(hashlib.sha256(tok.encode()).digest()[:4], "little")
                out[r, h % self.DIM] += 1.0
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


def hash_embedder() -> HashEmbedder:
    return HashEmbedder(model="hash", cache_dir=None)


POOL = load_pool()


def cheap_retrievers():
    """One of each retriever that runs without a real model, set up for the pool of worked examples."""
    return {
        "zero": ZeroRetriever(),
        "fixk": FixKRetriever(fix_id_list=[3, 0, 7]),
        "random": RandomRetriever(ice_num=4, seed=43),
        "random_excl": RandomRetriever(ice_num=4, seed=7, exclude_self=True),
        "sliding_window": SlidingWindowRetriever(k=3),
        "bm25": BM25Retriever(ice_num=4),
        "bm25_excl": BM25Retriever(ice_num=4, exclude_self=True),
        "dense_hash": _dense(ice_num=4),
        "dpp_hash": DPPRetriever(ice_num=3, candidate_num=10, embedder=hash_embedder()),
        "votek_hash": VotekRetriever(ice_num=4, embedder=hash_embedder()),
    }


def _dense(**kw):
    from ctxbench.retrievers.dense import DenseRetriever

    return DenseRetriever(embedder=hash_embedder(), **kw)


def _as_tuples(hits: list[Retrieved]):
    return [(tuple(h.indices), tuple(np.round(h.scores, 5))) for h in hits]


# --- the contract shared by every retriever ----------------------------------------------------------------------

@pytest.mark.parametrize("name", list(cheap_retrievers()))
def test_contract_determinism_shards_order(name):
    queries = pool_queries(POOL)
    r1 = cheap_retrievers()[name].fit(POOL)
    full = r1.retrieve(queries)
    assert len(full) == len(queries)
    k = r1.default_k()
    for h in full:
        assert len(h.indices) == len(h.scores) == k
        assert all(isinstance(i, int) and 0 <= i < len(POOL) for i in h.indices)
        assert list(h.scores) == sorted(h.scores, reverse=True)  # best first
    # determinism: again, and with a fresh instance
    assert _as_tuples(r1.retrieve(queries)) == _as_tuples(full)
    assert _as_tuples(cheap_retrievers()[name].fit(POOL).retrieve(queries)) == _as_tuples(full)
    # the same result per row whether the data comes in 1 or 3 shards, and in any order
    shards = [queries[i::3] for i in range(3)]
    by_id = {}
    for shard in shards:
        r = cheap_retrievers()[name].fit(POOL)
        for q, h in zip(shard, r.retrieve(shard)):
            by_id[q["id"]] = h
    assert _as_tuples([by_id[q["id"]] for q in queries]) == _as_tuples(full)
    rev = r1.retrieve(queries[::-1])
    assert _as_tuples(rev[::-1]) == _as_tuples(full)


@pytest.mark.parametrize("name", list(cheap_retrievers()))
def test_contract_leaves_global_random_state_alone(name):
    pyrandom.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    before = (pyrandom.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state().clone())
    cheap_retrievers()[name].fit(POOL).retrieve(pool_queries(POOL))
    after = (pyrandom.getstate(), np.random.get_state()[1], torch.get_rng_state())
    assert before[0] == after[0]
    assert np.array_equal(before[1], after[1])
    assert torch.equal(before[2], after[2])


@pytest.mark.parametrize("name", list(cheap_retrievers()))
def test_contract_errors(name):
    r = cheap_retrievers()[name]
    with pytest.raises(RuntimeError, match="fit"):
        r.retrieve(pool_queries(POOL))
    with pytest.raises(ValueError, match="share the id"):
        r.fit([POOL[0], POOL[1], dict(POOL[0])])
    with pytest.raises(ValueError, match="'id'"):
        r.fit([{k: v for k, v in POOL[0].items() if k != "id"}])
    r.fit(POOL)
    with pytest.raises(ValueError, match="larger than the pool"):
        r.retrieve(pool_queries(POOL)[:2], k=len(POOL) + 1)
    with pytest.raises(ValueError, match="'id'"):
        r.retrieve([{"prompt": "no id", "index": 0}])
    assert r.retrieve([]) == []


@pytest.mark.parametrize("cls, kw", [(RandomRetriever, {}), (BM25Retriever, {}), (SlidingWindowRetriever, {}),
                                     (DPPRetriever, {"candidate_num": 40, "embedder": None}),
                                     (VotekRetriever, {"embedder": None})])
def test_ice_num_larger_than_pool_is_refused(cls, kw):
    kw = {k: (hash_embedder() if v is None else v) for k, v in kw.items()}
    if cls is SlidingWindowRetriever:
        r = cls(k=len(POOL) + 1)
        msg = f"k={len(POOL) + 1} is larger than the pool"
    else:
        r = cls(ice_num=len(POOL) + 1, **kw)
        msg = f"ice_num={len(POOL) + 1} is larger than the pool"
    with pytest.raises(ValueError, match=msg):
        r.fit(POOL)


@pytest.mark.parametrize("bad, key", [(dict(ice_num=-1), "ice_num"), (dict(ice_num=1.5), "ice_num"),
                                      (dict(k1=0), "k1"), (dict(b=2), "b"), (dict(method="okapi"), "method"),
                                      (dict(stopwords="de"), "stopwords"), (dict(fields=[]), "fields")])
def test_bad_parameters_name_the_parameter(bad, key):
    with pytest.raises(ValueError, match=rf"^{key}="):
        BM25Retriever(**bad)


# --- zero, fixk, random, sliding window ------------------------------------------------------------------------

def test_zero_returns_nothing():
    r = ZeroRetriever().fit(POOL)
    assert [h.indices for h in r.retrieve(pool_queries(POOL)[:3])] == [[], [], []]
    assert r.retrieve(pool_queries(POOL)[:1], k=3)[0].indices == []


def test_fixk_checks_every_index_when_built():
    with pytest.raises(ValueError, match=r"fix_id_list=\[0, -1\]: index -1 is out of range of \[0, len\(pool\)\)"):
        FixKRetriever(fix_id_list=[0, -1])
    with pytest.raises(ValueError, match=r"fix_id_list index 7 is out of range of \[0, 5\)"):
        FixKRetriever(fix_id_list=[0, 7, 1]).fit(POOL[:5])
    with pytest.raises(ValueError, match="integer"):
        FixKRetriever(fix_id_list=[0, "1"])
    r = FixKRetriever(fix_id_list=[4, 0, 2]).fit(POOL[:5])
    hits = r.retrieve(pool_queries(POOL)[:3])
    assert [h.indices for h in hits] == [[4, 0, 2]] * 3  # the given order is the prompt order
    hits[0].indices.append(99)  # copies, not one shared list
    assert hits[1].indices == [4, 0, 2] and r.fix_id_list == [4, 0, 2]
    assert r.retrieve(pool_queries(POOL)[:1], k=2)[0].indices == [4, 0]
    assert r.ids_of(hits[1]) == [POOL[4]["id"], POOL[0]["id"], POOL[2]["id"]]
    with pytest.raises(ValueError, match="larger than fix_id_list"):
        r.retrieve(pool_queries(POOL)[:1], k=4)


def test_random_draws_per_row_from_its_own_generator():
    r = RandomRetriever(ice_num=5, seed=43).fit(POOL)
    q = {"id": "row-17", "prompt": "x"}
    a = r.retrieve([q])[0].indices
    assert len(set(a)) == 5
    # the same row id in another batch, at another place, gives the same draw; the seed changes it
    other = [{"id": f"other-{i}", "prompt": "y"} for i in range(7)]
    assert r.retrieve(other[:3] + [q] + other[3:])[3].indices == a
    assert RandomRetriever(ice_num=5, seed=44).fit(POOL).retrieve([q])[0].indices != a
    # uniform over the pool: every row drawn, counts close to their expectation
    rows = [{"id": f"r{i}", "prompt": ""} for i in range(3000)]
    counts = Counter(i for h in r.retrieve(rows) for i in h.indices)
    expected = 3000 * 5 / len(POOL)
    assert set(counts) == set(range(len(POOL)))
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 70  # 30 degrees of freedom: p < 1e-4 above 70


def test_random_exclude_self():
    r = RandomRetriever(ice_num=len(POOL) - 1, seed=1, exclude_self=True).fit(POOL)
    for i, h in enumerate(r.retrieve(pool_queries(POOL))):
        assert i not in h.indices and len(set(h.indices)) == len(POOL) - 1
    with pytest.raises(ValueError, match="exclude_self needs a pool of at least"):
        RandomRetriever(ice_num=len(POOL), exclude_self=True).fit(POOL)
    # a query that is not in the pool may use every row
    assert len(r.retrieve([{"id": "new"}], k=len(POOL))[0].indices) == len(POOL)


def _reference_sliding(n_pool: int, i: int, k: int) -> list[int]:
    """OpenCompass's SlidingWindowRetriever for test position i (within the pool's size)."""
    if i < k:
        prev = list(range(max(0, i - k), i))
        return list(range(n_pool - (k - len(prev)), n_pool)) + prev
    return list(range(i - k, i))


def test_sliding_window_matches_the_reference():
    for k in (0, 1, 3):
        r = SlidingWindowRetriever(k=k).fit(POOL)
        hits = r.retrieve(pool_queries(POOL))
        assert [h.indices for h in hits] == [_reference_sliding(len(POOL), i, k) for i in range(len(POOL))]
    r = SlidingWindowRetriever(k=2).fit(POOL[:5])
    assert r.retrieve([{"id": "x", "index": 7}])[0].indices == [0, 1]  # past the pool's end: wraps
    with pytest.raises(ValueError, match="'index' must hold the row's position"):
        r.retrieve([{"id": "x"}])


def test_example_rows_carry_the_dataset_position(morehopqa_path):
    from ctxbench.datasets.morehopqa import load_morehopqa

    examples = load_morehopqa(morehopqa_path)[:6]
    rows = example_rows(examples)
    assert [r["index"] for r in rows] == list(range(6))
    assert rows[2]["id"] == examples[2].example_id and rows[2]["prompt"] == examples[2].prompt
    assert set(rows[0]) == {"id", "prompt", "context", "question", "index"}  # no gold answer copied into a query row
    assert [r["index"] for r in example_rows(examples[3:], start=3)] == [3, 4, 5]


def test_query_rows_split_the_question_where_the_data_marks_it(morehopqa_path):
    """MoreHopQA marks its question (the prompt's last line): the query row reads it first under the configs' default
    fields; a row without the mark (RULER) reads its whole prompt as context."""
    import json

    from ctxbench.datasets.morehopqa import load_morehopqa

    raw = json.loads(morehopqa_path.read_text(encoding="utf-8"))
    examples = load_morehopqa(morehopqa_path)
    rows = example_rows(examples)
    for r, src, ex in zip(rows, raw, examples):
        assert r["question"] == src["question"].strip()
        assert ex.prompt == r["context"] + "\n" + src["question"]  # the context line, then the question line
    fields = OmegaConf.load(ROOT / "conf" / "retriever" / "dense.yaml")["fields"]
    assert list(fields) == ["question", "context"]
    assert row_text(rows[0], fields).startswith(raw[0]["question"].strip() + " ")
    plain = example_rows([CachedExample(prompt="An essay.\nWhat is the magic number?", metadata={"id": "r/0"})])[0]
    assert "question" not in plain and plain["context"] == plain["prompt"]
    # the pool of worked examples has both fields; a pool with neither is refused by name
    assert all(p["question"] and p["context"] for p in load_pool())
    with pytest.raises(ValueError, match=r"fields=\['question', 'context'\]: no pool row has text"):
        BM25Retriever(ice_num=1, fields=["question", "context"]).fit([{"id": "a", "prompt": "x y"}])


# --- BM25 ------------------------------------------------------------------------------------------------------

def brute_force_bm25(docs: list[list[str]], query: list[str], k1=1.5, b=0.75) -> np.ndarray:
    """Lucene BM25 written out: idf = ln(1 + (N - df + 0.5)/(df + 0.5)), tf part tf/(tf + k1(1 - b + b dl/avgdl)),
    summed over the query's tokens (repeats counted)."""
    n = len(docs)
    avgdl = sum(len(d) for d in docs) / n
    df = Counter(t for d in docs for t in set(d))
    tfs = [Counter(d) for d in docs]
    out = np.zeros(n)
    for t in query:
        if t not in df:
            continue
        idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
        for i, d in enumerate(docs):
            tf = tfs[i][t]
            if tf:
                out[i] += idf * tf / (tf + k1 * (1 - b + b * len(d) / avgdl))
    return out


def test_bm25_matches_brute_force_on_wikipedia():
    corpus = wiki_corpus(400)
    queries = wiki_queries(60, start=0) + wiki_queries(20, start=1000)  # 20 with no article of their own
    r = BM25Retriever(ice_num=10, fields=["title", "text"], query_fields=["text"]).fit(corpus)
    doc_tokens = bm25_tokenize([row_text(d, ["title", "text"]) for d in corpus], "en")
    q_tokens = bm25_tokenize([q["text"] for q in queries], "en")
    got = r.retrieve(queries, k=10)
    scores = r.scores(queries)
    hits_own = 0
    for qi, q in enumerate(queries):
        expect = brute_force_bm25(doc_tokens, q_tokens[qi])
        np.testing.assert_allclose(scores[qi], expect, rtol=2e-5, atol=2e-5)
        order = sorted(range(len(corpus)), key=lambda i: (-round(expect[i], 4), i))[:10]
        assert got[qi].indices[:5] == order[:5] or np.allclose(
            [expect[i] for i in got[qi].indices], [expect[i] for i in order], atol=1e-4)
        np.testing.assert_allclose(got[qi].scores, [expect[i] for i in got[qi].indices], rtol=2e-5, atol=2e-5)
        hits_own += qi < 60 and got[qi].indices[0] == qi
    assert hits_own >= 50  # a title + description finds its own article


def test_bm25_ties_and_unknown_words():
    docs = [{"id": str(i), "prompt": t} for i, t in enumerate(["apple pie", "apple tart", "plum", "apple pie"])]
    r = BM25Retriever(ice_num=3).fit(docs)
    h = r.retrieve([{"id": "q", "prompt": "Apple!"}, {"id": "z", "prompt": "zebra quokka"}])
    assert h[0].indices[:2] == [0, 1] or h[0].scores[0] == h[0].scores[1]
    s = r.scores([{"id": "q", "prompt": "apple"}])[0]
    assert h[0].indices == sorted(h[0].indices[:3], key=lambda i: (-s[i], i))
    assert h[1].indices == [0, 1, 2] and h[1].scores == [0.0, 0.0, 0.0]  # nothing matches: pool order
    assert BM25Retriever(ice_num=2, exclude_self=True).fit(docs).retrieve([{"id": "0", "prompt": "apple pie"}])[0] \
        .indices == [3, 1]


def test_top_k_is_a_stable_sort():
    rng = np.random.default_rng(0)
    for _ in range(50):
        s = rng.integers(0, 4, size=40).astype(float)
        k = int(rng.integers(1, 40))
        idx, sc = top_k(s, k)
        expect = sorted(range(40), key=lambda i: (-s[i], i))[:k]
        assert idx.tolist() == expect and sc.tolist() == [s[i] for i in expect]
    assert top_k(np.array([3.0, 1.0, 2.0]), 2, exclude=[0])[0].tolist() == [2, 1]


# --- dense family on a deterministic bag-of-words embedder -------------------------------------------------------

def test_dense_search_matches_brute_force_and_excludes_self():
    corpus = wiki_corpus(300)
    r = _dense(ice_num=8, fields=["title", "text"], query_fields=["text"]).fit(corpus)
    queries = wiki_queries(40)
    emb_d = r.embedder.encode([row_text(d, ["title", "text"]) for d in corpus], 0)
    emb_q = r.embedder.encode([q["text"] for q in queries], 0)
    got = r.retrieve(queries)
    for qi in range(len(queries)):
        s = emb_d @ emb_q[qi]
        idx, sc = top_k(s, 8)
        np.testing.assert_allclose(got[qi].scores, sc, atol=1e-5)
        assert got[qi].indices == idx.tolist() or np.allclose(s[got[qi].indices], sc, atol=1e-5)
    r2 = _dense(ice_num=3, exclude_self=True).fit(POOL)
    for i, h in enumerate(r2.retrieve(pool_queries(POOL))):
        assert i not in h.indices and len(h.indices) == 3


def _naive_greedy_dpp(L: np.ndarray, k: int) -> list[int]:
    chosen: list[int] = []
    for _ in range(k):
        best, best_v = None, -np.inf
        for i in range(L.shape[0]):
            if i in chosen:
                continue
            sub = L[np.ix_(chosen + [i], chosen + [i])]
            v = np.linalg.slogdet(sub)[1]
            if v > best_v + 1e-12:
                best, best_v = i, v
        chosen.append(best)
    return chosen


def test_greedy_map_dpp_matches_the_naive_greedy():
    rng = np.random.default_rng(3)
    for _ in range(20):
        x = rng.normal(size=(12, 8))
        L = x @ x.T + 1e-3 * np.eye(12)
        assert greedy_map_dpp(L, 5) == _naive_greedy_dpp(L, 5)
    L = np.ones((4, 4))  # rank one: after the first pick nothing adds volume; the rest come in order
    assert greedy_map_dpp(L, 3) == [0, 1, 2]


def test_dpp_selects_among_candidates_by_relevance_and_diversity():
    corpus = wiki_corpus(200)
    queries = wiki_queries(20)
    dense = _dense(ice_num=10, fields=["title", "text"], query_fields=["text"]).fit(corpus)
    r = DPPRetriever(ice_num=4, candidate_num=10, scale_factor=0.1, embedder=hash_embedder(),
                     fields=["title", "text"], query_fields=["text"]).fit(corpus)
    top = dense.retrieve(queries)
    got = r.retrieve(queries)
    for t, g in zip(top, got):
        assert set(g.indices) <= set(t.indices) and len(set(g.indices)) == 4
        assert g.scores == sorted(g.scores, reverse=True)
        assert g.indices[0] == t.indices[0]  # the most relevant candidate always comes first
    # strong relevance weight: the top-k by similarity; weak: more diverse sets
    rel = DPPRetriever(ice_num=4, candidate_num=10, scale_factor=1e-3, embedder=hash_embedder(),
                       fields=["title", "text"], query_fields=["text"]).fit(corpus).retrieve(queries)
    assert sum(set(a.indices) == set(t.indices[:4]) for a, t in zip(rel, top)) >= 18
    div = DPPRetriever(ice_num=4, candidate_num=10, scale_factor=10.0, embedder=hash_embedder(),
                       fields=["title", "text"], query_fields=["text"]).fit(corpus).retrieve(queries)
    emb = r.embeddings

    def mean_sim(ix):
        e = emb[ix]
        s = e @ e.T
        return (s.sum() - np.trace(s)) / (len(ix) * (len(ix) - 1))

    assert np.mean([mean_sim(d.indices) for d in div]) < np.mean([mean_sim(a.indices) for a in rel])
    with pytest.raises(ValueError, match="candidate_num"):
        DPPRetriever(ice_num=5, candidate_num=3, embedder=hash_embedder())


def _reference_votek(emb, select_num, k, threshold):
    """The documented vote-k rule written out with a dense similarity matrix (no fill)."""
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    sims = unit @ unit.T
    n = len(emb)
    voters = [set() for _ in range(n)]
    for i in range(n):
        near = [j for j in sorted(range(n), key=lambda j: (-sims[i, j], j)) if j != i][:k]
        for j in near:
            voters[j].add(i)
    chosen = []
    for j in sorted((j for j in range(n) if voters[j]), key=lambda j: (-len(voters[j]), j)):
        if len(chosen) < select_num and not any(len(voters[j] & voters[c]) >= threshold * len(voters[j])
                                                for c in chosen):
            chosen.append(j)
    return chosen


def test_votek_votes_overlap_and_seeded_fill():
    # two clusters of three points: each point votes for its two cluster mates
    a, b = np.array([1.0, 0, 0]), np.array([0, 1.0, 0])
    emb = np.stack([a + [0, 0.01, 0.02], a + [0, 0.02, 0.01], a + [0, 0.0, 0.03],
                    b + [0.01, 0, 0.02], b + [0.02, 0, 0.01], b + [0.0, 0, 0.03]]).astype(np.float32)
    assert votek_select(emb, 2, votek_k=2, overlap_threshold=0.5, seed=0) == [0, 3]  # one per cluster
    assert votek_select(emb, 2, votek_k=2, overlap_threshold=1.0, seed=0) == [0, 1]  # only subsets are skipped
    rng = np.random.default_rng(1)
    for trial in range(6):
        emb = rng.normal(size=(40, 8)).astype(np.float32)
        for threshold in (1.0, 0.5):
            expect = _reference_votek(emb, 40, 3, threshold)
            got = votek_select(emb, 40, 3, threshold, seed=trial)
            assert got[:len(expect)] == expect
            assert sorted(got) == list(range(40))  # the rest filled, each row once
            assert got == votek_select(emb, 40, 3, threshold, seed=trial)  # seeded fill
            assert got[:10] == votek_select(emb, 10, 3, threshold, seed=trial)[:10]  # a longer selection extends
    r = VotekRetriever(ice_num=4, embedder=hash_embedder()).fit(POOL)
    hits = r.retrieve(pool_queries(POOL))
    assert all(h.indices == hits[0].indices for h in hits) and len(set(hits[0].indices)) == 4
    hits[0].indices.append(0)
    assert len(r.retrieve(pool_queries(POOL)[:1])[0].indices) == 4
    ex = VotekRetriever(ice_num=4, exclude_self=True, embedder=hash_embedder()).fit(POOL)
    shared = ex.retrieve([{"id": "new"}])[0].indices
    own = ex.retrieve([{"id": POOL[shared[0]]["id"]}])[0].indices
    assert shared[0] not in own and own[:3] == shared[1:]


# --- MDL with a tiny causal LM ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_lm(smol_tokenizer):
    model = random_llama(len(smol_tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=64, max_position_embeddings=4096)
    return model, smol_tokenizer


def _nll_of_tokens(model, ids, first):
    """Mean -log p of ids[first:], each given the tokens before it, by a plain full forward."""
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    return -np.mean([logp[p - 1, ids[p]].item() for p in range(first, len(ids))])


def test_label_nll_is_the_mean_label_cross_entropy(tiny_lm):
    model, tok = tiny_lm
    prefix, labels = "Question: what is two plus two?\nAnswer:", [" four", " five apples", " 4"]
    got = label_nll(model, tok, prefix, labels, add_special_tokens=False, batch_size=2)
    for lab, g in zip(labels, got):
        # these labels start with a space, so the prefix's tokens end where the label's begin
        pre = tok(prefix, add_special_tokens=False)["input_ids"]
        ids = pre + tok(lab, add_special_tokens=False)["input_ids"]
        assert ids == tok(prefix + lab, add_special_tokens=False)["input_ids"]
        assert g == pytest.approx(_nll_of_tokens(model, ids, len(pre)), rel=1e-4, abs=1e-5)
    assert label_entropy(np.array([1.0, 1.0])) == pytest.approx(math.log(2))


def test_label_nll_scores_the_label_as_the_rendered_text_tokenises_it(tiny_lm):
    """After ``Answer type: `` the text has ``[':', ' number']``; the label tokenised on its own would be scored as
    ``'number'`` after a lone ``' '`` token, which is not the text the model sees."""
    model, tok = tiny_lm
    prefix, labels = "Question: how many legs has a cat?\nAnswer type: ", ["number", "word", ""]
    whole = tok(prefix + "number", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(whole[-2:]) == [":", "Ġnumber"]
    apart = tok(prefix, add_special_tokens=False)["input_ids"] + tok("number", add_special_tokens=False)["input_ids"]
    assert apart != whole  # the case this test exists for
    got = label_nll(model, tok, prefix, labels, add_special_tokens=False, batch_size=8)
    assert got[0] == pytest.approx(_nll_of_tokens(model, whole, len(whole) - 1), rel=1e-4, abs=1e-5)
    assert abs(got[0] - _nll_of_tokens(model, apart, len(apart) - 1)) > 1e-5  # a near-uniform random model
    w = tok(prefix + "word", add_special_tokens=False)["input_ids"]
    assert got[1] == pytest.approx(_nll_of_tokens(model, w, len(whole) - 1), rel=1e-4, abs=1e-5)
    assert got[2] == 0.0  # an empty label
    # batch size and special tokens: the same scores one at a time; BOS stays in the prefix
    one = [label_nll(model, tok, prefix, [lb], add_special_tokens=False)[0] for lb in labels]
    assert got == pytest.approx(one, rel=1e-5, abs=1e-6)
    with pytest.raises(ValueError, match="no tokens before the label"):
        label_nll(model, tok, "", ["number", "word"], add_special_tokens=False)


def test_mdl_keeps_the_set_with_the_lowest_label_entropy(tiny_lm):
    model, tok = tiny_lm
    pool = POOL[:12]
    r = MDLRetriever(ice_num=2, candidate_num=5, select_time=3, seed=1, labels=["yes", "no", "maybe"],
                     embedder=hash_embedder())
    r.use_lm(SimpleNamespace(model=model, tokenizer=tok))  # a LoadedLM's two fields
    r.fit(pool)
    queries = [{"id": f"q{i}", "prompt": POOL[20 + i]["prompt"]} for i in range(2)]
    got = r.retrieve(queries)
    dense = _dense(ice_num=5).fit(pool).retrieve(queries)
    for q, g, d in zip(queries, got, dense):
        sets = r.candidate_sets(q, d.indices, 2)
        assert sets[0] == d.indices[:2] and len(sets) == 3
        ents = [label_entropy(label_nll(model, tok, r.template.for_model(q, [pool[i] for i in s], tok).text,
                                        ["yes", "no", "maybe"], add_special_tokens=False)) for s in sets]
        assert g.indices == sets[int(np.argmin(ents))]
        assert r.last_entropy[q["id"]] == pytest.approx(min(ents))
    # per-row generators: the same sets in another batch
    assert r.retrieve(queries[::-1])[::-1] == got
    with pytest.raises(ValueError, match="needs a causal LM"):
        MDLRetriever(ice_num=1, labels=["a", "b"], embedder=hash_embedder()).fit(pool).retrieve(queries[:1])
    with pytest.raises(ValueError, match="label_field='nope'"):
        MDLRetriever(ice_num=1, label_field="nope", embedder=hash_embedder()).fit(pool)
    auto = MDLRetriever(ice_num=1, embedder=hash_embedder()).fit(pool)  # labels: the pool's distinct answers
    assert auto._labels == sorted({p["answer"] for p in pool})


def test_bm25_builds_its_index_without_debug_lines(caplog):
    """bm25s sets its own logger to DEBUG when imported; a fitted BM25 retriever leaves no line below WARNING."""
    import logging

    caplog.set_level(logging.DEBUG)
    r = BM25Retriever(ice_num=4).fit(POOL)
    assert len(r.retrieve(pool_queries(POOL)[:2])) == 2
    assert logging.getLogger("bm25s").getEffectiveLevel() == logging.WARNING
    assert not [rec for rec in caplog.records if rec.name.startswith("bm25s")]


def test_the_retriever_capabilities_are_declared_protocols():
    """What the stages ask of a retriever beyond the interface is declared (``CountsExamples``: a fixed ``ice_num``;
    ``EncodesCorpus``: an embedder and corpus-shard encoding) and read with isinstance: every retriever option is
    classified by its own fields, and a pool smaller than ``ice_num`` is refused through the protocol."""
    import dataclasses

    from hydra.utils import get_class

    from ctxbench.core.part import find_targets
    from ctxbench.retrievers.base import CountsExamples, EncodesCorpus
    from helpers.paths import ROOT

    classes = {get_class(t) for (group, _), t in find_targets(ROOT / "conf").items() if group == "retriever"}
    assert len(classes) >= 9
    required = {FixKRetriever: {"fix_id_list": [0]}, SlidingWindowRetriever: {"k": 1}}
    for cls in classes:
        names = {f.name for f in dataclasses.fields(cls)}
        built = cls(**required.get(cls, {}))
        assert isinstance(built, CountsExamples) == ("ice_num" in names), cls
        assert isinstance(built, EncodesCorpus) == ("embedder" in names), cls
    with pytest.raises(ValueError, match="ice_num=3 is larger than the pool"):
        RandomRetriever(ice_num=3).fit([{"id": "a"}, {"id": "b"}])
    assert RandomRetriever(ice_num=2).fit([{"id": "a"}, {"id": "b"}]).default_k() == 2
