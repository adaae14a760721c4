"""Sentence-level coverage (docs/metrics.md, legacy): does each gold sentence get about its fair share of the
attribution?

Per gold sentence g: ``ratio_g = |mass on g| / total prompt mass`` with ``E = 1 / #gold``; reported are the fractions of
gold sentences with ratio in (E/2, 3E/2), above E/2, and above E. As in FlashTrace's code, a sentence's mass is the
absolute value of its summed token weights and the total is the sum of those absolute masses over all sentences
(tokens outside every sentence form one extra part of the total, so no prompt mass is lost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Optional, Sequence

import numpy as np

from ctxbench.core.errors import ExampleRefused
from ctxbench.metrics.scorer import Metric, Scorer

COVERAGE_KEYS = ("within", "above_half", "above_mean")


def token_sentences(token_offsets: Sequence[Sequence[int]], sentence_spans: Sequence[Sequence[int]]) -> np.ndarray:
    """For each token, the sentence sharing the most characters with it (the earlier one on a tie), or -1 when it
    overlaps none (zero-width tokens, whitespace between sentences)."""
    starts = np.array([s for s, _ in sentence_spans], dtype=np.int64)
    ends = np.array([e for _, e in sentence_spans], dtype=np.int64)
    out = np.full(len(token_offsets), -1, dtype=np.int64)
    if starts.size == 0:
        return out
    for i, (a, b) in enumerate(token_offsets):
        overlap = np.minimum(ends, b) - np.maximum(starts, a)
        j = int(np.argmax(overlap))  # argmax returns the first maximum
        if overlap[j] > 0:
            out[i] = j
    return out


def sentence_masses(w, token_offsets, sentence_spans) -> tuple[np.ndarray, float]:
    """Summed token weights per sentence (S,) and the summed weight of tokens outside every sentence."""
    w = np.nan_to_num(np.asarray(w, dtype=np.float64).reshape(-1), nan=0.0)
    if w.shape[0] != len(token_offsets):
        raise ValueError(f"{w.shape[0]} weights for {len(token_offsets)} token offsets")
    owner = token_sentences(token_offsets, sentence_spans)
    masses = np.bincount(owner[owner >= 0], weights=w[owner >= 0], minlength=len(sentence_spans))
    return masses, float(w[owner < 0].sum())


def coverage(w, token_offsets, sentence_spans, gold_sentences: Iterable[int]) -> Optional[dict[str, float]]:
    """The three coverage fractions; None when there is no gold sentence, zeros when the prompt carries no mass."""
    gold = sorted({int(g) for g in gold_sentences})
    if not gold:
        return None
    if gold[0] < 0 or gold[-1] >= len(sentence_spans):
        raise ValueError(f"gold sentence index out of range for {len(sentence_spans)} sentences")
    masses, rest = sentence_masses(w, token_offsets, sentence_spans)
    total = float(np.abs(masses).sum() + abs(rest))
    if total == 0:
        return dict.fromkeys(COVERAGE_KEYS, 0.0)
    ratios = np.abs(masses[gold]) / total
    e = 1.0 / len(gold)
    return {"within": float(np.mean((ratios > e / 2) & (ratios < 1.5 * e))),
            "above_half": float(np.mean(ratios > e / 2)),
            "above_mean": float(np.mean(ratios > e))}


@dataclass
class CoverageScorer(Scorer):
    """Mode ``coverage`` (legacy): how many gold sentences (``attr_mask_indices``) get about their share of the mass."""
    log_probs_only: ClassVar[bool] = True

    name: ClassVar[str] = "coverage"
    needs_model: ClassVar[bool] = False
    title: ClassVar[str] = "Coverage of gold sentences (legacy)"
    csv_label: ClassVar[str] = "Coverage"

    def metrics(self) -> list[Metric]:
        return [Metric(k, k, higher_is_better=True) for k in COVERAGE_KEYS]

    def check(self, examples, dataset):
        if not any(e.attr_mask_indices for e in examples):
            raise ExampleRefused(f"mode coverage needs gold sentence indices (attr_mask_indices); dataset {dataset!r} "
                                 f"has none")

    def score(self, model, tokenizer, prepared, result, weights):
        gold = prepared.example.attr_mask_indices or []
        offsets = prepared.model_input.prompt_offsets
        cov = {v: coverage(w, offsets, prepared.sentences, gold) for v, w in weights.items()}
        return {self.name: cov if any(c is not None for c in cov.values()) else None}

    def values(self, view_record):
        return view_record
