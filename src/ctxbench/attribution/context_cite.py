"""A ContextCite-style surrogate (Cohen-Wang et al., NeurIPS 2024; docs/attribution.md, "ContextCite").

Random ablations of the prompt's sentences, the log-probability of the explained span under each, and a sparse linear
model (LASSO) from "which sentences were kept" to that log-probability; its weights are the sentence scores.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np
import torch

from ctxbench.attribution.base import AttributionResult, Attributor, empty_matrix
from ctxbench.attribution.perturbation import (SPREADS, SentenceUnits, ablated_token_scores,
                                               spread_onto_tokens)
from ctxbench.part import neutral, param, refuse
from ctxbench.tokens import eos_id

# --- the surrogate ----------------------------------------------------------------------------------------------

def lasso(X: np.ndarray, y: np.ndarray, alpha: float, tol: float = 1e-10, max_sweeps: int = 10_000
          ) -> tuple[np.ndarray, float]:
    """Minimise ``(1 / 2n) ||y - b - X w||^2 + alpha ||w||_1`` (scikit-learn's ``Lasso`` objective; the intercept b is
    not penalised) by cyclic coordinate descent. Returns ``(w, b)``.

    Columns are centred so b drops out; a constant column gets weight 0. Stops when a whole sweep moves no weight by
    more than ``tol`` times the largest weight (or 1).
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, k = X.shape
    x_mean, y_mean = X.mean(0), y.mean()
    Xc = X - x_mean
    sq = (Xc ** 2).sum(0) / n
    w = np.zeros(k)
    resid = y - y_mean
    for _ in range(max_sweeps):
        moved = 0.0
        for j in np.flatnonzero(sq > 0):
            rho = Xc[:, j] @ resid / n + sq[j] * w[j]
            new = np.sign(rho) * max(abs(rho) - alpha, 0.0) / sq[j]
            if new != w[j]:
                resid -= Xc[:, j] * (new - w[j])
                moved = max(moved, abs(new - w[j]))
                w[j] = new
        if moved <= tol * max(1.0, np.abs(w).max()):
            break
    return w, float(y_mean - x_mean @ w)


def r_squared(y: np.ndarray, pred: np.ndarray) -> float:
    """``1 - SS_res / SS_tot`` around the mean of ``y``; NaN when y is constant."""
    y = np.asarray(y, dtype=np.float64)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return float("nan") if ss_tot == 0 else 1.0 - float(((y - pred) ** 2).sum()) / ss_tot


@dataclass(frozen=True)
class Surrogate:
    weights: np.ndarray  # (K,) one per sentence
    intercept: float
    heldout_r2: float  # on the held-out ablations, which the fit never saw


def split_heldout(n: int, holdout: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the training and held-out ablations: ``round(holdout * n)`` (at least 2) held out at random."""
    n_test = max(2, round(holdout * n))
    order = rng.permutation(n)
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def fit_surrogate(masks: np.ndarray, targets: np.ndarray, alpha: float, train: np.ndarray,
                  test: np.ndarray) -> Surrogate:
    """LASSO from the keep masks (N, K) to the targets (N,) on ``train``; R^2 on ``test``."""
    X = np.asarray(masks, dtype=np.float64)
    w, b = lasso(X[train], targets[train], alpha)
    return Surrogate(weights=w, intercept=b, heldout_r2=r_squared(targets[test], X[test] @ w + b))


# --- ablations ----------------------------------------------------------------------------------------------------

def example_rng(seed: int, input_ids) -> np.random.Generator:
    """A generator of its own for one example: the run's seed and a digest of the example's tokens, so the masks do not
    depend on which examples came before, and no global random state is read or changed."""
    ids = np.asarray(input_ids, dtype=np.int64).reshape(-1)
    digest = hashlib.sha256(ids.tobytes()).digest()
    return np.random.default_rng([int(seed), *np.frombuffer(digest, dtype=np.uint32).tolist()])


def ablation_masks(rng: np.random.Generator, n: int, k: int, keep_prob: float) -> np.ndarray:
    """(n, k) bool: True where a sentence is kept, each independently with probability ``keep_prob``."""
    return rng.random((n, k)) < keep_prob


# --- the method ---------------------------------------------------------------------------------------------------

@dataclass
class ContextCiteAttributor(Attributor):
    """ContextCite over the prompt's sentences.

    ``n_ablations`` random ablations (each sentence kept with probability ``keep_prob``, the rest replaced by the pad
    id), drawn from ``seed`` and the example's tokens; the target of an ablation is the summed log-probability of the
    sink span (the whole generation without one), teacher-forced. A LASSO (``alpha``) fitted on all but a random
    ``holdout`` share of the ablations gives one weight per sentence, spread onto its tokens (``copy``: each token the
    weight; ``share``: an equal share) in the rows of the sink span; other rows NaN, generated columns 0. The held-out
    R^2 and the ablation count are reported in the result's ``info``.
    """

    name: ClassVar[str] = "context_cite"
    n_ablations: int = 64
    keep_prob: float = param(0.5, gt=0, lt=1)
    alpha: float = param(0.01, ge=0)
    holdout: float = param(0.2, gt=0, lt=1)
    spread: str = param("copy", choices=SPREADS)
    seed: int = 0
    batch_size: int = neutral(4, ge=1)
    forward_attn_impl: Optional[str] = "sdpa"

    def __post_init__(self):
        if self.n_ablations - max(2, round(self.holdout * self.n_ablations)) < 2:
            raise refuse("n_ablations", self.n_ablations, f"leaves fewer than 2 ablations to fit once {self.holdout:g} "
                         "of them (at least 2) are held out")

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        t0 = time.perf_counter()
        units = SentenceUnits.of(tokenizer, ctx)
        rng = example_rng(self.seed, ctx.input_ids.detach().cpu().numpy())
        masks = ablation_masks(rng, self.n_ablations, len(units.prompt), self.keep_prob)
        train, test = split_heldout(self.n_ablations, self.holdout, rng)
        positions = [units.prompt_positions(ctx, u) for u in range(len(units.prompt))]
        ablations = [torch.cat([ctx.prompt_positions[:0]] + [positions[u] for u in np.flatnonzero(~keep)])
                     for keep in masks]
        rows = np.arange(sink[0], sink[1] + 1) if sink is not None else np.arange(ctx.G)
        _, logp = ablated_token_scores(model, ctx.input_ids, ctx.gen_start, ablations, eos_id(tokenizer),
                                       self.batch_size, "logprob", self.forward_attn_impl)
        fit = fit_surrogate(masks, logp[:, rows].sum(1), self.alpha, train, test)
        A = empty_matrix(ctx.G, ctx.P)
        A[rows] = 0.0
        for u, cols in enumerate(units.prompt):
            A[np.ix_(rows, cols)] = spread_onto_tokens(fit.weights[u], cols, self.spread)
        timings["attribution"] = time.perf_counter() - t0
        r2 = fit.heldout_r2
        return AttributionResult(matrix=A, method=self.name, P=ctx.P, G=ctx.G, rows_written=rows,
                                 info={"ablations": self.n_ablations, "heldout": int(test.size),
                                       "heldout_r2": r2 if np.isfinite(r2) else None,
                                       "prompt_sentences": len(units.prompt),
                                       "nonzero_weights": int(np.count_nonzero(fit.weights))})
