"""``mode=retrieval``: evaluate the ``retriever`` (and optional ``reranker``) on retrieval data, FlagEmbedding's way
(docs/retrieval.md). Its fields keep FlagEmbedding's names where they fit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from ctxbench.core.part import Part, param, refuse
from ctxbench.retrieval.metrics import parse_metric_key


@dataclass
class RetrievalMode(Part):
    """``search_top_k``: hits kept per query; ``rerank_top_k``: the top hits a reranker rescores (the others are
    dropped); ``k_values``: the cut-offs of every metric; ``eval_metrics``: the report's tables
    (``<metric>_at_<k>``, metric one of ndcg, map, recall, precision, mrr, recall_cap); ``ignore_identical_ids``: a
    document with the query's id never counts as a hit (the next one takes its place); ``missing_as_zero``: a judged
    query absent from the run counts 0 (BEIR's denominator) instead of being left out; ``overwrite``: recompute
    stored search results instead of reusing them (results made with other settings are refused without it);
    ``output_dir``: where search results are stored (null: ``<job dir>/search_results``)."""

    name: ClassVar[str] = "retrieval"

    search_top_k: int = param(1000, ge=1)
    rerank_top_k: int = param(100, ge=1)
    k_values: list[int] = field(default_factory=lambda: [1, 3, 5, 10, 100, 1000])
    eval_metrics: list[str] = field(default_factory=lambda: ["ndcg_at_10", "recall_at_10"])
    ignore_identical_ids: bool = False
    missing_as_zero: bool = False
    overwrite: bool = False
    output_dir: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.k_values:
            raise refuse("k_values", self.k_values, "give at least one cut-off")
        for k in self.k_values:
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise refuse("k_values", self.k_values, f"{k!r} is not an integer >= 1")
        self.k_values = sorted(set(self.k_values))
        self.eval_metrics = list(self.eval_metrics)
        if not self.eval_metrics:
            raise refuse("eval_metrics", self.eval_metrics, "name at least one metric, e.g. ndcg_at_10")
        for key in self.eval_metrics:
            try:
                _, k = parse_metric_key(key)
            except ValueError as exc:
                raise refuse("eval_metrics", self.eval_metrics, str(exc)) from None
            if k not in self.k_values:
                raise refuse("eval_metrics", self.eval_metrics, f"{key} needs k={k} in k_values {self.k_values}")
