"""Recovery (docs/metrics.md; RULER only, higher is better): the share of gold prompt tokens (those overlapping an
evidence span) among the top ``fraction`` (10% in the FlashTrace paper, ICML 2026) of prompt tokens by attribution
weight.

A method that removes stop tokens (FlashTrace, ``ifr_multi_hop_both``: its result carries ``prompt_stop_mask``) is
scored as the FlashTrace code scores it (``evaluate_attr_recovery_skip_tokens`` in its ``flashtrace/improved.py``):
stop tokens are left out of the ranking, of the budget k and of the gold set."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Iterable, Optional, Sequence

import numpy as np

from ctxbench.core.errors import ExampleRefused
from ctxbench.metrics.faithfulness import deletion_order
from ctxbench.metrics.scorer import Metric, Scorer
from ctxbench.core.part import neutral, param
from ctxbench.utils.spans import tokens_overlapping


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


@dataclass(frozen=True)
class Budget:
    """What one recall was computed over: ``ranked`` tokens, the budget ``k`` and the ``gold`` tokens among the ranked.
    ``ceiling``: the best recall any ranking can reach, ``min(k, gold) / gold``."""

    ranked: int
    k: int
    gold: int

    @property
    def ceiling(self) -> float:
        return min(self.k, self.gold) / self.gold

    def to_dict(self) -> dict:
        return {"ranked": self.ranked, "k": self.k, "gold": self.gold, "k_over_gold": self.k / self.gold,
                "ceiling": self.ceiling}


def recall_budget(P: int, gold: Iterable[int], fraction: float = 0.1, rank_mask=None) -> Optional[Budget]:
    """The ranked tokens, k and gold count of ``recall_at_fraction`` (None when no gold token is ranked)."""
    gold_set = {int(g) for g in gold}
    if rank_mask is not None:
        mask = _mask(rank_mask, P)
        gold_set = {g for g in gold_set if 0 <= g < P and mask[g]}
        n = int(mask.sum())
    else:
        n = P
    if not gold_set or n == 0:
        return None
    return Budget(n, top_k_count(n, fraction), len(gold_set))


def _mask(rank_mask, P: int) -> np.ndarray:
    mask = np.asarray(rank_mask, dtype=bool).reshape(-1)
    if mask.shape[0] != P:
        raise ValueError(f"rank_mask has {mask.shape[0]} entries for {P} prompt tokens")
    return mask


def recall_at_fraction(w, gold: Iterable[int], fraction: float = 0.1, rank_mask=None) -> Optional[float]:
    """|top-k(w) ∩ gold| / |gold| with ``k = max(1, ceil(fraction * P))``; ``w`` is clamped at 0 (NaN counts 0), so
    all non-positive tokens tie and fall back to position order. None when there is no gold token (the caller counts
    the example as skipped). ``rank_mask`` (P bools) ranks only those tokens: P, k and gold are restricted to them."""
    w = np.nan_to_num(np.asarray(w, dtype=np.float64).reshape(-1), nan=0.0).clip(min=0.0)
    P = w.shape[0]
    gold_set = {int(g) for g in gold}
    if any(not 0 <= g < P for g in gold_set):
        raise ValueError(f"gold token index out of range for {P} prompt tokens")
    if rank_mask is not None:
        mask = _mask(rank_mask, P)
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
    """Mode ``recovery``: Recall@``fraction`` of the evidence tokens (``metadata.needle_spans``); higher is better.

    ``skip_stop_tokens``: a method that removes stop tokens (its result has ``prompt_stop_mask``: FlashTrace) is
    scored on its non-stop prompt tokens only (ranking, k and gold), as the FlashTrace code scores it; false ranks
    every prompt token for every method. Each record's ``recovery_budget`` holds k, the gold count and the ceiling.

    ``hops`` (0: off): also the recall of each reasoning step's evidence, ``recall@hop1`` .. ``recall@hop<hops>``
    (needles labelled ``hop``: hotpotqa_long's question decomposition), and of the bridge evidence,
    ``recall@bridge``: the evidence sentences that contain no gold answer (``metadata.outputs``), which a method
    that finds where the answer was copied from cannot find by that. Same ranking and budget k as ``recall``; an
    example without such evidence leaves the figure out."""
    log_probs_only: ClassVar[bool] = True

    name: ClassVar[str] = "recovery"
    needs_model: ClassVar[bool] = False
    title: ClassVar[str] = "Recovery"
    csv_label: ClassVar[str] = "Recovery"
    fraction: float = param(0.1, gt=0, le=1)
    skip_stop_tokens: bool = True
    # figures added beside recall, recall itself unchanged: results made with or without them compare
    hops: int = neutral(0, ge=0)

    @property
    def label(self) -> str:
        return f"Recall@{self.fraction * 100:g}%"

    def metrics(self) -> list[Metric]:
        out = [Metric("recall", self.label, higher_is_better=True)]
        if self.hops:
            out += [Metric(f"recall@{s}", f"{self.label} ({s.replace('hop', 'hop ')})", higher_is_better=True)
                    for s in ("bridge", *(f"hop{h}" for h in range(1, self.hops + 1)))]
        return out

    def csv_metrics(self) -> list[Metric]:
        return self.metrics()[:1]  # FlashTrace's Recovery CSV columns

    def subsets(self, prepared) -> dict[str, list[int]]:
        """The evidence tokens of each subset ``hops`` asks for (bridge, hop1, ...), those with any."""
        needles = prepared.example.metadata.get("needle_spans") or []
        meta = prepared.example.metadata
        answers = [a.lower() for a in (meta.get("outputs") or [meta.get("reference_answer") or ""]) if a]
        groups = {"bridge": [n for n in needles if not any(a in n["sentence"].lower() for a in answers)]}
        groups.update({f"hop{h}": [n for n in needles if n.get("hop") == h] for h in range(1, self.hops + 1)})
        offsets = prepared.model_input.prompt_offsets
        out = {name: gold_token_indices(offsets, [n["span"] for n in group]) for name, group in groups.items()}
        return {name: tokens for name, tokens in out.items() if tokens}

    def check(self, examples, dataset):
        if not any(e.metadata.get("needle_spans") for e in examples):
            raise ExampleRefused(f"mode recovery needs evidence spans (metadata.needle_spans, RULER data from "
                                 f"prepare_data); dataset {dataset!r} has none")

    def score(self, model, tokenizer, prepared, result, weights):
        gold = prepared.evidence_tokens
        mask = None
        if self.skip_stop_tokens and result.prompt_stop_mask is not None:
            mask = ~np.asarray(result.prompt_stop_mask, dtype=bool)
        budget = recall_budget(int(result.P), gold, self.fraction, mask) if gold else None
        rec = {v: recall_at_fraction(w, gold, self.fraction, mask) for v, w in weights.items()} if budget else None
        if rec and self.hops:
            subsets = self.subsets(prepared)
            rec = {v: {"recall": r, **{f"recall@{name}": recall_at_fraction(weights[v], tokens, self.fraction, mask)
                                       for name, tokens in subsets.items()}}
                   for v, r in rec.items()}
        skipped = None if rec else ("no prompt token overlaps the evidence spans" if not gold
                                    else "every evidence token is a stop token")
        return {self.name: rec, "recovery_skipped": skipped, "gold_tokens": len(gold or []),
                "recovery_budget": None if budget is None else {**budget.to_dict(), "stop_tokens_skipped":
                                                                mask is not None}}

    def values(self, view_record):
        if view_record is None:
            return None
        return dict(view_record) if isinstance(view_record, dict) else {"recall": view_record}
