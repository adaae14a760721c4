"""Top-k drop (docs/metrics.md): how much the explained target's log-probability falls when the k sources a method
scores highest are removed (``source_ablation``: the prompt's sentences, deleted); higher is better, in nats.

A source's score is the sum of the method's prompt weights over its tokens; the sources are ranked by it, highest
first, the earlier one on a tie. ``drop@k = log p(target | all sources) - log p(target | all but the top k)`` for
each k in ``ks`` (None where the example has fewer than k sources). The removal is whole sentences ranked by the
method's own sentence scores, not a token deletion set, so it reads every method the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ctxbench.metrics.scorer import Metric
from ctxbench.metrics.source_ablation import AblationScorer
from ctxbench.core.part import neutral, refuse


def top_sources(source_scores, k: int) -> np.ndarray:
    """The k highest-scored sources, ties to the earlier source."""
    s = np.asarray(source_scores, dtype=np.float64)
    return np.argsort(-s, kind="stable")[:k]


def without(n: int, gone) -> np.ndarray:
    keep = np.ones(n, dtype=bool)
    keep[np.asarray(gone, dtype=np.int64)] = False
    return keep


@dataclass
class TopKDropScorer(AblationScorer):
    """Mode ``topk``: ``drop@k`` for each k in ``ks`` (module doc)."""

    name: ClassVar[str] = "topk"
    title: ClassVar[str] = "Top-k source drop"
    csv_label: ClassVar[str] = "Drop"
    ks: list[int] = field(default_factory=lambda: [1, 3, 5])
    batch_size: int = neutral(4, ge=1)

    def __post_init__(self):
        self.ks = [int(k) for k in self.ks]
        if not self.ks or any(k < 1 for k in self.ks) or len(set(self.ks)) < len(self.ks):
            raise refuse("ks", self.ks, "distinct integers >= 1")

    def metrics(self) -> list[Metric]:
        return [Metric(f"drop@{k}", f"Drop@{k}", higher_is_better=True) for k in self.ks]

    def score(self, model, tokenizer, prepared, result, weights):
        store = self.store
        ab = store.for_example(model, tokenizer, prepared)
        S = ab.n_sources
        if S == 0:
            return {self.name: None, "topk_info": {"sources": 0, "skipped": "no sources"}}
        full = np.ones(S, dtype=bool)
        removed = {v: {k: without(S, top_sources(ab.source_scores(w), k)) for k in self.ks if k <= S}
                   for v, w in weights.items()}
        counts = store.ensure(model, tokenizer, prepared, ab,
                              [full] + [m for by_k in removed.values() for m in by_k.values()], self.batch_size)
        out = {}
        for view, by_k in removed.items():
            base = ab.target(full, view)
            out[view] = {f"drop@{k}": (base - ab.target(by_k[k], view)) if k in by_k else None for k in self.ks}
        return {self.name: out, "topk_info": {"sources": S, **counts}}

    def values(self, view_record):
        return None if view_record is None else {f"drop@{k}": view_record.get(f"drop@{k}") for k in self.ks}
