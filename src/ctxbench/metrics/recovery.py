"""Recovery (docs/metrics.md; RULER only, higher is better): the share of gold prompt tokens (those overlapping an evidence
span) among the top ``fraction`` (10% in the paper) of prompt tokens by attribution weight."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Iterable, Optional, Sequence

import numpy as np

from ctxbench.errors import ExampleRefused
from ctxbench.metrics.faithfulness import deletion_order
from ctxbench.metrics.scorer import Metric, Scorer
from ctxbench.spans import tokens_overlapping


def gold_token_indices(token_offsets: Sequence[Sequence[int]], spans: Iterable[Sequence[int]],
                       span_shift: int = 0) -> list[int]:
    """Sorted indices of prompt tokens overlapping any ``[s, e)`` span. ``token_offsets`` (P pairs) and the spans must
    be in the same string's characters; ``span_shift`` is added to the spans when they are not (e.g. +1 when the
    tokens come from ``" " + prompt``). Zero-width tokens and empty spans never count."""
    gold: set[int] = set()
    for s, e in spans:
        s, e = int(s) + span_shift, int(e) + span_shift
        if e > s:  # an empty span would otherwise match a token that straddles its position
            gold.update(tokens_overlapping(token_offsets, s, e))
    return sorted(gold)


def top_k_count(n: int, fraction: float) -> int:
    """``max(1, ceil(fraction * n))`` capped at n, with the product rounded first: 0.1 * 30 is 3.0000000000000004 in
    floating point and a plain ceil would give 4."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction={fraction} must be in (0, 1]")
    return min(n, max(1, math.ceil(round(fraction * n, 9))))


def top_k_indices(w, k: int, rank_mask=None) -> np.ndarray:
    """The k prompt indices with the largest weight (among rankable ones); ties go to the earlier position
    (the same ranking as the faithfulness deletion order)."""
    return deletion_order(w, rank_mask)[:k]


def recall_at_fraction(w, gold: Iterable[int], fraction: float = 0.1, rank_mask=None) -> Optional[float]:
    """|top-k(w) ∩ gold| / |gold| with ``k = max(1, ceil(fraction * P))``; ``w`` is clamped at 0 (NaN counts 0), so
    all non-positive tokens tie and fall back to position order. None when there is no gold token (the caller counts
    the example as skipped). ``rank_mask`` (P bools) ranks only those tokens: P and gold are restricted to them."""
    w = np.nan_to_num(np.asarray(w, dtype=np.float64).reshape(-1), nan=0.0).clip(min=0.0)
    P = w.shape[0]
    gold_set = {int(g) for g in gold}
    if any(not 0 <= g < P for g in gold_set):
        raise ValueError(f"gold token index out of range for {P} prompt tokens")
    if rank_mask is not None:
        mask = np.asarray(rank_mask, dtype=bool).reshape(-1)
        if mask.shape[0] != P:
            raise ValueError(f"rank_mask has {mask.shape[0]} entries for {P} prompt tokens")
        gold_set = {g for g in gold_set if mask[g]}
        n = int(mask.sum())
    else:
        n = P
    if not gold_set or n == 0:
        return None
    top = top_k_indices(w, top_k_count(n, fraction), rank_mask)
    return len(gold_set.intersection(top.tolist())) / len(gold_set)


@dataclass
class RecoveryScorer(Scorer):
    """Mode ``recovery``: Recall@``fraction`` of the evidence tokens (``metadata.needle_spans``); higher is better."""

    name: ClassVar[str] = "recovery"
    title: ClassVar[str] = "Recovery"
    csv_label: ClassVar[str] = "Recovery"
    fraction: float = 0.1

    def __post_init__(self):
        top_k_count(1, self.fraction)  # refuses a fraction outside (0, 1]

    @property
    def label(self) -> str:
        return f"Recall@{self.fraction * 100:g}%"

    def metrics(self) -> list[Metric]:
        return [Metric("recall", self.label, higher_is_better=True)]

    def check(self, examples, dataset):
        if not any(e.metadata.get("needle_spans") for e in examples):
            raise ExampleRefused(f"mode recovery needs evidence spans (metadata.needle_spans, RULER data from "
                                 f"prepare_data); dataset {dataset!r} has none")

    def score(self, model, tokenizer, prepared, result, weights):
        gold = prepared.evidence_tokens
        rec = {v: recall_at_fraction(w, gold, self.fraction) for v, w in weights.items()} if gold else None
        return {self.name: rec, "recovery_skipped": None if rec else "no prompt token overlaps the evidence spans",
                "gold_tokens": len(gold or [])}

    def values(self, view_record):
        return None if view_record is None else {"recall": view_record}

    def csv_metric_label(self, metric):
        return f"Recovery@{self.fraction * 100:g}%"

    def csv_extra_rows(self, summary, views):
        used = summary[self.name][views[0]]["recall"]["n"] if views else 0
        return [["Examples Used", str(used)], ["Examples Skipped", str(summary["examples"] - used)]]
