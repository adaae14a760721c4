"""Retrieval metrics (docs/retrieval.md#metrics): NDCG, MAP, Recall and P at each k through pytrec_eval; MRR@k and
capped recall@k by the project, with pytrec_eval's ranking and over the same query set.

Ranking (trec_eval's, for every metric): score descending, ties by document id descending in string order.
Relevant: relevance >= 1. The query set: queries of the qrels with at least one relevant document that are in the run
(a run entry with no hit counts 0 everywhere); with ``missing_as_zero`` every such query of the qrels counts, a query
missing from the run scoring 0 (BEIR's denominator). Run queries without qrels and qrels queries without a relevant
document are left out (and counted), never a crash. Values are fractions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

import numpy as np

Run = Mapping[str, Mapping[str, float]]  # {query id: {doc id: score}}
Qrels = Mapping[str, Mapping[str, int]]  # {query id: {doc id: relevance}}

# Our metric name -> (pytrec_eval measure family, the per-query key prefix it returns).
TREC_MEASURES = {"ndcg": ("ndcg_cut", "ndcg_cut_"), "map": ("map_cut", "map_cut_"), "recall": ("recall", "recall_"),
                 "precision": ("P", "P_")}
OWN_MEASURES = ("mrr", "recall_cap")
METRICS = (*TREC_MEASURES, *OWN_MEASURES)


def metric_key(metric: str, k: int) -> str:
    """FlagEmbedding's column names: ``ndcg_at_10``, ``recall_cap_at_100``, ..."""
    return f"{metric}_at_{k}"


def parse_metric_key(key: str) -> tuple[str, int]:
    """``"recall_cap_at_10"`` -> ``("recall_cap", 10)``; ValueError for anything else."""
    name, sep, k = key.rpartition("_at_")
    if not sep or name not in METRICS or not k.isdigit() or int(k) < 1:
        raise ValueError(f"{key!r}: expected <metric>_at_<k> with metric one of {', '.join(METRICS)}")
    return name, int(k)


def ranked(hits: Mapping[str, float]) -> list[str]:
    """Document ids in trec_eval's order: score descending, then id descending (string order)."""
    return [d for d, _ in sorted(hits.items(), key=lambda item: (item[1], item[0]), reverse=True)]


@dataclass(frozen=True)
class Evaluation:
    """``means[metric_key]``: the mean over ``queries``; ``per_query[qid][metric_key]``; ``skipped``: why queries were
    left out (``no_qrels``: in the run only; ``no_relevant``: judged, nothing relevant; ``not_in_run``: judged, absent
    from the run, left out unless ``missing_as_zero``)."""

    means: dict[str, Optional[float]]  # None when no query is evaluated
    per_query: dict[str, dict[str, float]]
    queries: list[str]
    skipped: dict[str, int]

    def to_dict(self) -> dict:
        return {"metrics": self.means, "n_queries": len(self.queries), "skipped": self.skipped}


def query_set(run: Run, qrels: Qrels, missing_as_zero: bool = False) -> tuple[list[str], dict[str, int]]:
    """The evaluated queries (sorted) and the counts of those left out (module doc)."""
    with_relevant = {q for q, docs in qrels.items() if any(int(r) >= 1 for r in docs.values())}
    in_run = set(run)
    chosen = with_relevant if missing_as_zero else with_relevant & in_run
    skipped = {"no_qrels": len(in_run - set(qrels)), "no_relevant": len(set(qrels) - with_relevant),
               "not_in_run": 0 if missing_as_zero else len(with_relevant - in_run)}
    return sorted(chosen), skipped


def evaluate(run: Run, qrels: Qrels, k_values: Iterable[int], missing_as_zero: bool = False) -> Evaluation:
    """Every metric of ``METRICS`` at every k (module doc)."""
    import pytrec_eval

    ks = sorted({int(k) for k in k_values})
    queries, skipped = query_set(run, qrels, missing_as_zero)
    # pytrec_eval needs str ids, int relevance and float scores (it raises TypeError otherwise).
    q_rels = {str(q): {str(d): int(r) for d, r in qrels[q].items()} for q in queries}
    q_run = {str(q): {str(d): float(s) for d, s in run[q].items()} for q in queries if run.get(q)}
    cut = ",".join(map(str, ks))
    evaluator = pytrec_eval.RelevanceEvaluator(q_rels, {f"{fam}.{cut}" for fam, _ in TREC_MEASURES.values()})
    trec = evaluator.evaluate(q_run) if q_run else {}
    per_query: dict[str, dict[str, float]] = {}
    for q in queries:
        values = trec.get(q)
        order = ranked(q_run.get(q, {}))
        relevant = {d for d, r in q_rels[q].items() if r >= 1}
        row = {}
        for k in ks:
            for name, (_, prefix) in TREC_MEASURES.items():
                row[metric_key(name, k)] = float(values[f"{prefix}{k}"]) if values else 0.0
            top = order[:k]
            first = next((i for i, d in enumerate(top) if d in relevant), None)
            row[metric_key("mrr", k)] = 0.0 if first is None else 1.0 / (first + 1)
            row[metric_key("recall_cap", k)] = sum(d in relevant for d in top) / min(len(relevant), k)
        per_query[q] = row
    names = [metric_key(m, k) for m in METRICS for k in ks]
    means = {n: float(np.mean([per_query[q][n] for q in queries])) if queries else None for n in names}
    return Evaluation(means, per_query, queries, skipped)
