"""Dense retrieval with the real offline embedder (all-MiniLM-L6-v2) on Wikipedia summaries: Faiss top-k against brute
force, the contract (shards, order, exclude_self), the embedding cache through fit, DPP / vote-k / MDL on real
embeddings. Slow: loads MiniLM (and SmolLM2 for MDL)."""

from __future__ import annotations

import numpy as np
import pytest

from ctxbench.models.embedder import Embedder
from ctxbench.retrievers.base import row_text, top_k
from ctxbench.retrievers.dense import DenseRetriever
from ctxbench.retrievers.dpp import DPPRetriever
from ctxbench.retrievers.mdl import MDLRetriever, label_nll
from ctxbench.retrievers.pool import load_pool
from ctxbench.retrievers.votek import VotekRetriever

from helpers.retrieval import pool_queries, wiki_corpus, wiki_queries

pytestmark = pytest.mark.slow

FIELDS = dict(fields=["title", "text"], query_fields=["text"])


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    """MiniLM at 128 tokens, its corpus embeddings cached, so the many fits below encode the corpus once."""
    return Embedder(batch_size=64, passage_max_length=128, cache_dir=str(tmp_path_factory.mktemp("emb"))).load()


@pytest.fixture(scope="module")
def corpus():
    return wiki_corpus(120)


@pytest.fixture(scope="module")
def queries():
    return wiki_queries(30) + wiki_queries(10, start=2000)


def test_dense_matches_brute_force(embedder, corpus, queries):
    r = DenseRetriever(ice_num=10, embedder=embedder, **FIELDS).fit(corpus)
    got = r.retrieve(queries)
    e_doc = embedder.encode_corpus([row_text(d, ["title", "text"]) for d in corpus])
    e_q = embedder.encode_queries([q["text"] for q in queries])
    own_first = 0
    for qi, h in enumerate(got):
        s = e_doc.astype(np.float64) @ e_q[qi].astype(np.float64)
        idx, sc = top_k(s, 10)
        np.testing.assert_allclose(h.scores, sc, atol=1e-5)
        np.testing.assert_allclose(s[h.indices], h.scores, atol=1e-5)
        assert h.indices == idx.tolist() or np.allclose(s[h.indices], sc, atol=1e-5)  # near-ties may swap
        own_first += qi < 30 and h.indices[0] == qi
    assert own_first >= 22  # "title description" finds its article


def test_dense_contract_shards_order_exclude_self(embedder, corpus, queries):
    r = DenseRetriever(ice_num=5, embedder=embedder, **FIELDS).fit(corpus)
    full = r.retrieve(queries)
    for i in range(3):
        shard = queries[i::3]
        for q, h in zip(shard, DenseRetriever(ice_num=5, embedder=embedder, **FIELDS).fit(corpus).retrieve(shard)):
            ref = full[queries.index(q)]
            assert h.indices == ref.indices
            np.testing.assert_allclose(h.scores, ref.scores, atol=1e-5)
    pool = load_pool()
    ex = DenseRetriever(ice_num=3, exclude_self=True, embedder=embedder).fit(pool)
    for i, h in enumerate(ex.retrieve(pool_queries(pool))):
        assert i not in h.indices and len(h.indices) == 3
    with pytest.raises(ValueError, match="ice_num=300 is larger than the pool"):
        DenseRetriever(ice_num=300, embedder=embedder).fit(corpus)


def test_fit_reuses_the_corpus_embeddings(tmp_path, corpus):
    emb = Embedder(cache_dir=str(tmp_path), passage_max_length=64)
    a = DenseRetriever(ice_num=3, embedder=emb, **FIELDS).fit(corpus[:60])
    assert emb.last_stats["cache"] == "written"
    b = DenseRetriever(ice_num=3, embedder=emb, **FIELDS).fit(corpus[:60])
    assert emb.last_stats["cache"] == "hit"
    np.testing.assert_array_equal(a.embeddings, b.embeddings)
    DenseRetriever(ice_num=3, embedder=emb, **FIELDS).fit(corpus[1:61])  # other texts: recomputed
    assert emb.last_stats["cache"] == "written"
    assert len(list((tmp_path / "embeddings").rglob("embeddings.npy"))) == 2


def test_dpp_and_votek_on_real_embeddings(embedder, corpus, queries):
    dense = DenseRetriever(ice_num=12, embedder=embedder, **FIELDS).fit(corpus).retrieve(queries)
    dpp = DPPRetriever(ice_num=4, candidate_num=12, embedder=embedder, **FIELDS).fit(corpus)
    got = dpp.retrieve(queries)
    for d, g in zip(dense, got):
        assert set(g.indices) <= set(d.indices) and g.indices[0] == d.indices[0]
    assert [h.indices for h in DPPRetriever(ice_num=4, candidate_num=12, embedder=embedder, **FIELDS)
            .fit(corpus).retrieve(queries[::-1])][::-1] == [h.indices for h in got]
    v = VotekRetriever(ice_num=5, embedder=embedder, **FIELDS).fit(corpus)
    a = v.retrieve(queries[:3])
    assert a[0].indices == a[2].indices and len(set(a[0].indices)) == 5
    assert VotekRetriever(ice_num=5, embedder=embedder, **FIELDS).fit(corpus).retrieve(queries[:1])[0].indices \
        == a[0].indices


def test_mdl_with_smollm2(embedder, smollm2):
    pool = load_pool()
    r = MDLRetriever(ice_num=1, candidate_num=3, select_time=2, labels=["65", "108", "1976"], embedder=embedder)
    r.use_lm(smollm2)
    r.fit(pool)
    q = [{"id": "t0", "prompt": "The writer Ana Vell was born in Porto.\nWhat is the ASCII code of the first letter of "
                                 "the city where Ana Vell was born?"}]
    h = r.retrieve(q)[0]
    assert len(h.indices) == 1 and np.isfinite(r.last_entropy["t0"])


def test_morehopqa_queries_read_their_question_first(embedder, morehopqa_path):
    """Under fields [prompt] the 256-token encoder cuts many MoreHopQA prompts before their question, so rows sharing a
    context get one embedding and the same examples; read question first, each row gets its own."""
    from ctxbench.datasets.morehopqa import load_morehopqa
    from ctxbench.retrievers.pool import example_rows

    rows = example_rows(load_morehopqa(morehopqa_path))
    old = embedder.encode_queries([row_text(r, ["prompt"]) for r in rows])
    new = embedder.encode_queries([row_text(r, ["question", "context"]) for r in rows])
    same_old = {i for i in range(len(rows)) for j in range(len(rows)) if i != j and np.allclose(old[i], old[j])}
    assert len(same_old) >= 10  # 30 rows on the packaged sample (bench/bench_icl_fields.py)
    assert not any(np.allclose(new[i], new[j]) for i in same_old for j in same_old if i != j)
    # two rows that shared an embedding: the same examples before, their own examples now
    a, b = next((a, b) for a in sorted(same_old) for b in sorted(same_old) if a < b and np.allclose(old[a], old[b]))
    pool = load_pool()
    before = [h.indices for h in DenseRetriever(ice_num=4, fields=["prompt"], embedder=embedder).fit(pool)
              .retrieve([rows[a], rows[b]])]
    after = [h.indices for h in DenseRetriever(ice_num=4, fields=["question", "context"], embedder=embedder)
             .fit(pool).retrieve([rows[a], rows[b]])]
    assert before[0] == before[1] and after[0] != after[1]


def test_mdl_label_nll_on_smollm2_scores_the_label_in_its_text(smollm2):
    """On the real model: after ``Answer type: `` the label is scored as the text tokenises it (``' number'``), which
    SmolLM2 finds far likelier than ``'number'`` after a lone space token (the old tokenisation)."""
    import torch

    model, tok = smollm2.model, smollm2.tokenizer
    prefix = "Question: How many legs does a cat have?\nAnswer type: "
    got = label_nll(model, tok, prefix, ["number", "person"], add_special_tokens=False)
    for label, g in zip(["number", "person"], got):
        ids = tok(prefix + label, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
        assert g == pytest.approx(-logp[len(ids) - 2, ids[-1]].item(), rel=1e-4)  # one token: ' number' / ' person'
    apart = tok(prefix, add_special_tokens=False)["input_ids"] + tok("number", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([apart])).logits[0].float(), -1)
    assert -logp[len(apart) - 2, apart[-1]].item() > got[0] + 1.0


def test_grouped_retrieval_ranks_like_fit_and_retrieve(embedder, corpus, queries, smollm2):
    """mode=retrieval ranks every group through ``retrieve_grouped`` (one encoding call for all pools); each dense
    option must rank there exactly as fit(pool).retrieve(queries) does (DPP, vote-k and MDL with their own logic, vote-k
    selecting again for each pool)."""
    groups = [(corpus[:60], queries[:4]), (corpus[60:], queries[4:8])]
    mdl = MDLRetriever(ice_num=1, candidate_num=3, select_time=2, labels=["yes", "no"], embedder=embedder, **FIELDS)
    mdl.use_lm(smollm2)
    options = [DenseRetriever(ice_num=5, embedder=embedder, **FIELDS),
               DPPRetriever(ice_num=4, candidate_num=12, scale_factor=10.0, embedder=embedder, **FIELDS),
               VotekRetriever(ice_num=5, embedder=embedder, **FIELDS), mdl]
    for r in options:
        k = r.ice_num
        want = [[h.indices for h in r.fit(pool).retrieve(qs, k)] for pool, qs in groups]
        got = [[h.indices for h in hits] for hits in r.retrieve_grouped(groups, k)]
        assert got == want, type(r).__name__
    dense = [[h.indices for h in hits] for hits in options[0].retrieve_grouped(groups, 4)]
    assert [[h.indices for h in hits] for hits in options[1].retrieve_grouped(groups, 4)] != dense  # DPP is not dense
