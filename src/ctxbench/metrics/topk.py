"""Top-k drop (docs/metrics.md): how much the explained target's log-probability falls when the k sources a method
scores highest are removed (``source_ablation``: the prompt's sentences, deleted); higher is better, in nats per
target token.

A source's score is the sum of the method's prompt weights over its tokens (or the method's own rule, as for the
``random`` and ``length`` controls: ``AttributionResult.source_scores``); the sources are ranked by it, highest
first, the earlier one on a tie. ``drop@k = (log p(target | all sources) - log p(target | all but the top k)) / n``
for each k in ``ks``, n the target's token count (None where the example has fewer than k sources): the mean drop
per target token, so that answers of 10 and 48 tokens, and tasks and variants, are on one scale. The removal is whole
sentences ranked by the method's own sentence scores, not a token deletion set, so it reads every method the same
way.

Records written before the per-token unit hold the summed drop and no ``tokens`` count; they are read as they were
meant, divided by the target's token count taken from the record (``legacy_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ctxbench.metrics.scorer import Metric
from ctxbench.metrics.source_ablation import TARGETS, AblationScorer
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
        return [Metric(f"drop@{k}", f"Drop@{k} {UNIT}", higher_is_better=True) for k in self.ks]

    def score(self, model, tokenizer, prepared, result, weights):
        store = self.store
        ab = store.for_example(model, tokenizer, prepared)
        S = ab.n_sources
        if S == 0:
            return {self.name: None, "topk_info": {"sources": 0, "skipped": "no sources"}}
        full = np.ones(S, dtype=bool)
        removed = {v: {k: without(S, top_sources(ab.source_scores(w, getattr(result, "source_scores", None)), k))
                       for k in self.ks if k <= S}
                   for v, w in weights.items()}
        counts = store.ensure(model, tokenizer, prepared, ab,
                              [full] + [m for by_k in removed.values() for m in by_k.values()], self.batch_size)
        out = {}
        for view, by_k in removed.items():
            base, n = ab.target(full, view), target_tokens(view, generated(prepared), prepared.sink_span)
            out[view] = {**{f"drop@{k}": (base - ab.target(by_k[k], view)) / n if k in by_k else None
                            for k in self.ks}, "tokens": n}
        return {self.name: out, "topk_info": {"sources": S, **counts}}

    def values(self, view_record):
        return None if view_record is None else {f"drop@{k}": view_record.get(f"drop@{k}") for k in self.ks}

    def example_values(self, records, views):
        return super().example_values([per_token(r, self.name) for r in records], views)


UNIT = "(nats/token)"  # in the column header: a drop is the mean over the target's tokens


def generated(prepared) -> int:
    """The number of generated tokens of a prepared example (its model input past ``gen_start``)."""
    mi = prepared.model_input
    return int(mi.input_ids.reshape(-1).shape[0]) - int(mi.gen_start)


def target_tokens(view: str, G: int, sink_span) -> int:
    """The token count of the target a view's drop is measured on (``source_ablation.TARGETS``): every generated
    token for ``all``, the sink span's for ``sink`` (the whole generation without one)."""
    if TARGETS[view] == "all" or sink_span is None:
        return int(G)
    return int(sink_span[1]) - int(sink_span[0]) + 1


def per_token(record: dict, field: str = "topk") -> dict:
    """``record`` with a summed drop (written before the per-token unit: its view records have no ``tokens``)
    divided by its target's token count, read from the record's ``G`` and ``sink_span``; other records as they are."""
    views = record.get(field)
    if not views or all(v is None or "tokens" in v for v in views.values()):
        return record
    out = {}
    for view, rec in views.items():
        if rec is None or "tokens" in rec:
            out[view] = rec
            continue
        n = target_tokens(view, record["G"], record.get("sink_span"))
        out[view] = {**{k: None if x is None else x / n for k, x in rec.items()}, "tokens": n}
    return {**record, field: out}
