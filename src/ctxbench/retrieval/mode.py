"""``mode=retrieval``: evaluate the ``retriever`` (and optional ``reranker``) on retrieval data, FlagEmbedding's way
(docs/retrieval.md). Its fields keep FlagEmbedding's names where they fit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from ctxbench.retrieval.metrics import parse_metric_key


def _positive_int(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name}={v!r}: expected an integer >= 1")


@dataclass
class RetrievalMode:
    """``search_top_k``: hits kept per query; ``rerank_top_k``: the top hits a reranker rescores (the others are
    dropped); ``k_values``: the cut-offs of every metric; ``eval_metrics``: the report's tables
    (``<metric>_at_<k>``, metric one of ndcg, map, recall, precision, mrr, recall_cap); ``ignore_identical_ids``: a
    document with the query's id never counts as a hit (the next one takes its place); ``missing_as_zero``: a judged
    query absent from the run counts 0 (BEIR's denominator) instead of being left out; ``overwrite``: recompute
    stored search results instead of reusing them (results made with other settings are refused without it);
    ``output_dir``: where search results are stored (null: ``<job dir>/search_results``)."""

    name: ClassVar[str] = "retrieval"

    search_top_k: int = 1000
    rerank_top_k: int = 100
    k_values: list[int] = field(default_factory=lambda: [1, 3, 5, 10, 100, 1000])
    eval_metrics: list[str] = field(default_factory=lambda: ["ndcg_at_10", "recall_at_10"])
    ignore_identical_ids: bool = False
    missing_as_zero: bool = False
    overwrite: bool = False
    output_dir: Optional[str] = None

    def __post_init__(self) -> None:
        _positive_int("search_top_k", self.search_top_k)
        _positive_int("rerank_top_k", self.rerank_top_k)
        self.k_values = sorted(set(self.k_values))
        if not self.k_values:
            raise ValueError("k_values: give at least one cut-off")
        for k in self.k_values:
            _positive_int("k_values", k)
        self.eval_metrics = list(self.eval_metrics)
        if not self.eval_metrics:
            raise ValueError("eval_metrics: name at least one metric, e.g. ndcg_at_10")
        for key in self.eval_metrics:
            try:
                _, k = parse_metric_key(key)
            except ValueError as exc:
                raise ValueError(f"eval_metrics: {exc}") from None
            if k not in self.k_values:
                raise ValueError(f"eval_metrics: {key} needs k={k} in k_values {self.k_values}")
