"""LDS, the linear datamodeling score (docs/metrics.md; Park et al., "TRAK", ICML 2023, as ContextCite, Cohen-Wang
et al., NeurIPS 2024, uses it for context attribution); higher is better, in [-1, 1].

``n_masks`` seeded masks over the prompt's sources (``source_ablation``: sentences, each kept with probability
``keep_prob``); under each, the explained target's log-probability with the removed sources deleted, and the method's
prediction, the sum of its source scores over the kept sources. LDS is the Spearman rank correlation of the two over
the masks: does the attribution order the ablations as the model does? It deletes no token set of the method's
choosing, so it ranks methods independently of a deletion set. (Spearman is rank-based, so scoring the logit of the
target's probability, ContextCite's target, gives the same value as its log-probability.) An example whose masks
give a constant target or a constant prediction has no LDS (None), as has one with fewer than two sources.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.stats import spearmanr

from ctxbench.metrics.scorer import Metric
from ctxbench.metrics.source_ablation import AblationScorer
from ctxbench.core.part import neutral, param


def spearman(x, y) -> float | None:
    """Spearman's rho (average ranks for ties), None when either side is constant."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(spearmanr(x, y).statistic)


def lds(masks: np.ndarray, targets, source_scores) -> float | None:
    """Spearman between ``targets`` (M,) and ``masks @ source_scores`` ((M, S) bool masks, True = kept)."""
    return spearman(targets, np.asarray(masks, dtype=np.float64) @ np.asarray(source_scores, dtype=np.float64))


@dataclass
class LDSScorer(AblationScorer):
    """Mode ``lds``: the linear datamodeling score over ``n_masks`` seeded source masks (module doc)."""

    name: ClassVar[str] = "lds"
    title: ClassVar[str] = "Linear datamodeling score"
    csv_label: ClassVar[str] = "LDS"
    n_masks: int = param(32, ge=3)
    keep_prob: float = param(0.5, gt=0, lt=1)
    seed: int = 0
    batch_size: int = neutral(4, ge=1)

    def metrics(self) -> list[Metric]:
        return [Metric("lds", "LDS", higher_is_better=True)]

    def score(self, model, tokenizer, prepared, result, weights):
        store = self.store
        ab = store.for_example(model, tokenizer, prepared)
        if ab.n_sources < 2:
            return {self.name: None, "lds_info": {"sources": ab.n_sources, "skipped": "fewer than two sources"}}
        masks = store.masks(prepared, ab, self.seed, self.n_masks, self.keep_prob)
        counts = store.ensure(model, tokenizer, prepared, ab, masks, self.batch_size)
        out = {}
        for view, w in weights.items():
            targets = [ab.target(m, view) for m in masks]
            out[view] = {"lds": lds(masks, targets, ab.source_scores(w, getattr(result, "source_scores", None)))}
        return {self.name: out, "lds_info": {"sources": ab.n_sources, "masks": self.n_masks, **counts}}

    def values(self, view_record):
        return None if view_record is None else {"lds": view_record["lds"]}
