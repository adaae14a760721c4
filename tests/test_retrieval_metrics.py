"""Retrieval metrics against hand-computed values, a second (plain Python) implementation of the trec_eval
definitions, and pytrec_eval's own measures where it defines them."""

import math

import numpy as np
import pytest

from ctxbench.retrieval.metrics import METRICS, evaluate, metric_key, parse_metric_key, ranked


def reference(run_q: dict, rels: dict, k: int) -> dict:
    """The trec_eval definitions written out: rank by (score desc, doc id desc); relevant = relevance >= 1;
    linear gain; P divides by k, MAP by the number of relevant documents."""
    by_id = sorted(run_q, reverse=True)  # doc id descending, then a stable sort by score descending
    order = sorted(by_id, key=lambda d: -run_q[d])
    top = order[:k]
    relevant = {d for d, r in rels.items() if r >= 1}
    hits = [d in relevant for d in top]
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(top) if rels.get(d, 0) > 0)
    ideal = sorted((r for r in rels.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    ap = sum(sum(hits[:i + 1]) / (i + 1) for i, h in enumerate(hits) if h) / len(relevant)
    first = next((i for i, h in enumerate(hits) if h), None)
    return {"ndcg": dcg / idcg, "map": ap, "recall": sum(hits) / len(relevant), "precision": sum(hits) / k,
            "mrr": 0.0 if first is None else 1 / (first + 1), "recall_cap": sum(hits) / min(len(relevant), k)}


def test_ranked_breaks_ties_by_doc_id_descending():
    assert ranked({"a": 0.5, "b": 0.5, "B": 0.5, "c": 0.9, "ab": 0.5}) == ["c", "b", "ab", "a", "B"]


def test_hand_computed_values_ties_and_k_beyond_the_list():
    # q1 ranks b, a, c, d (a and b tie at 0.9: b first). Relevant: a (1) at rank 2, c (2) at rank 3.
    run = {"q1": {"a": 0.9, "b": 0.9, "c": 0.5, "d": 0.1}, "q3": {"a": 1.0}}
    qrels = {"q1": {"a": 1, "c": 2, "e": 0}, "q2": {"x": 0}, "q4": {"y": 1}}
    ev = evaluate(run, qrels, [1, 3, 10])
    m = ev.means
    assert ev.queries == ["q1"] and ev.skipped == {"no_qrels": 1, "no_relevant": 1, "not_in_run": 1}
    for name in METRICS:
        assert m[metric_key(name, 1)] == 0.0  # b is not relevant
    idcg = 2 + 1 / math.log2(3)
    dcg = 1 / math.log2(3) + 2 / math.log2(4)
    assert m["ndcg_at_3"] == pytest.approx(dcg / idcg) == pytest.approx(0.6199062)
    assert m["ndcg_at_10"] == pytest.approx(0.6199062)
    assert m["map_at_3"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert m["precision_at_3"] == pytest.approx(2 / 3)
    assert m["precision_at_10"] == pytest.approx(0.2)  # trec_eval divides by k even past the list's end
    assert m["recall_at_3"] == m["recall_at_10"] == 1.0
    assert m["mrr_at_3"] == m["mrr_at_10"] == 0.5
    assert m["recall_cap_at_3"] == 1.0
    # BEIR's denominator: q4 (judged, relevant document, absent from the run) counts 0.
    zero = evaluate(run, qrels, [1, 3, 10], missing_as_zero=True)
    assert zero.queries == ["q1", "q4"] and zero.skipped["not_in_run"] == 0
    assert zero.means["ndcg_at_3"] == pytest.approx(0.6199062 / 2)
    assert zero.means["mrr_at_10"] == 0.25 and zero.per_query["q4"]["recall_at_10"] == 0.0


def test_recall_cap_divides_by_min_relevant_k():
    run = {"q": {"d1": 3.0, "d2": 2.0, "d3": 1.0}}
    qrels = {"q": {"d1": 1, "d2": 1, "d3": 1, "d4": 1, "d5": 1}}
    m = evaluate(run, qrels, [2, 10]).means
    assert m["recall_cap_at_2"] == 1.0 and m["recall_at_2"] == pytest.approx(0.4)
    assert m["recall_cap_at_10"] == pytest.approx(3 / 5)


def test_no_query_evaluable_gives_none_not_a_crash():
    ev = evaluate({"q": {"a": 1.0}}, {"q": {"a": 0}}, [1])
    assert ev.queries == [] and all(v is None for v in ev.means.values())
    ev = evaluate({}, {}, [5])
    assert ev.queries == [] and ev.skipped == {"no_qrels": 0, "no_relevant": 0, "not_in_run": 0}
    # A run entry with no hit at all counts 0 (pytrec_eval would drop it).
    ev = evaluate({"q": {}}, {"q": {"a": 1}}, [1, 5])
    assert ev.queries == ["q"] and ev.means["ndcg_at_5"] == 0.0 and ev.means["mrr_at_5"] == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_random_runs_agree_with_the_reference_and_pytrec_eval(seed):
    import pytrec_eval

    rng = np.random.default_rng(seed)
    docs = [f"d{i}" for i in range(30)]
    run, qrels = {}, {}
    for q in range(25):
        chosen = rng.choice(docs, size=int(rng.integers(1, 30)), replace=False)
        run[f"q{q}"] = {str(d): float(np.round(rng.random(), 1)) for d in chosen}  # 1 decimal: many ties
        judged = rng.choice(docs, size=int(rng.integers(1, 8)), replace=False)
        qrels[f"q{q}"] = {str(d): int(rng.integers(0, 3)) for d in judged}
    ks = [1, 3, 5, 10, 50]
    ev = evaluate(run, qrels, ks)
    expected_queries = sorted(q for q in qrels if any(r >= 1 for r in qrels[q].values()))
    assert ev.queries == expected_queries and ev.queries
    for q in ev.queries:
        for k in ks:
            ref = reference(run[q], qrels[q], k)
            for name, value in ref.items():
                assert ev.per_query[q][metric_key(name, k)] == pytest.approx(value, abs=1e-12), (q, name, k)
    # MRR@k is pytrec_eval's recip_rank on the run cut to its top k (trec order).
    for k in ks:
        cut = {q: {d: run[q][d] for d in ranked(run[q])[:k]} for q in ev.queries}
        rr = pytrec_eval.RelevanceEvaluator({q: qrels[q] for q in ev.queries}, {"recip_rank"}).evaluate(cut)
        assert ev.means[metric_key("mrr", k)] == pytest.approx(np.mean([rr[q]["recip_rank"] for q in ev.queries]))


def test_metric_keys():
    assert parse_metric_key("recall_cap_at_100") == ("recall_cap", 100)
    assert parse_metric_key("ndcg_at_10") == ("ndcg", 10)
    for bad in ("ndcg@10", "foo_at_3", "ndcg_at_0", "ndcg_at_x"):
        with pytest.raises(ValueError):
            parse_metric_key(bad)
