"""ContextCite (Cohen-Wang et al., "ContextCite: Attributing Model Generation to Context", NeurIPS 2024, and its
``context-cite`` package; docs/attribution.md, "ContextCite").

Random ablations of the prompt's sentences (the sources), the explained span's score under each, and a sparse linear
model (LASSO) from "which sources were kept" to that score; its weights are the source scores. By default as the
package does it: a source is removed by deleting it, the score is the logit of the span's probability, the penalty is
scaled by the span's length and each source's mask spread, and a question the data marks is not a source.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import ClassVar, Iterable, Optional, Sequence

import numpy as np
import torch

from ctxbench.attribution.base import AttributionResult, Attributor, empty_matrix
from ctxbench.attribution.memory import ablation_passes
from ctxbench.attribution.perturbation import (SPREADS, SentenceUnits, ablated_token_scores,
                                               spread_onto_tokens)
from ctxbench.utils.batching import run_in_batches
from ctxbench.models.attention import attention_kernel
from ctxbench.models.endpoint_lm import is_endpoint
from ctxbench.models.logits import scored
from ctxbench.core.part import neutral, param, refuse
from ctxbench.utils.tokens import eos_id

ABLATIONS = ("delete", "eos")
TARGETS = ("logit_prob", "log_prob")

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


def scaled_lasso(masks: np.ndarray, targets: np.ndarray, alpha: float, n_tokens: int) -> tuple[np.ndarray, float]:
    """The package's fit (``context_cite.solver.LassoRegression``): the LASSO on the standardised masks (each column
    centred and divided by its standard deviation; a constant column's by 1) against ``targets / n_tokens``, mapped
    back to the masks' units and multiplied by ``n_tokens``. In those units the penalty on ``w_j`` is
    ``alpha * n_tokens * std_j``. Returns ``(w, b)``: ``targets ≈ b + masks @ w``."""
    X = np.asarray(masks, dtype=np.float64)
    mean, std = X.mean(0), X.std(0)
    std = np.where(std > 0, std, 1.0)
    w_std, b_std = lasso((X - mean) / std, np.asarray(targets, dtype=np.float64) / n_tokens, alpha)
    w = w_std / std
    return w * n_tokens, float((b_std - mean @ w) * n_tokens)


def r_squared(y: np.ndarray, pred: np.ndarray) -> float:
    """``1 - SS_res / SS_tot`` around the mean of ``y``; NaN when y is constant."""
    y = np.asarray(y, dtype=np.float64)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return float("nan") if ss_tot == 0 else 1.0 - float(((y - pred) ** 2).sum()) / ss_tot


def fold_of(n: int, folds: int, rng: np.random.Generator) -> np.ndarray:
    """Each ablation's fold, ``0..folds-1``: a random permutation cut into folds of equal size (the first ``n % folds``
    one larger)."""
    out = np.empty(n, dtype=np.int64)
    out[rng.permutation(n)] = np.arange(n) % folds
    return out


def cross_validated_r2(masks: np.ndarray, targets: np.ndarray, alpha: float, n_tokens: int,
                       folds: np.ndarray) -> float:
    """R^2 of the out-of-fold predictions: each fold predicted by the fit on the others, all folds pooled."""
    X, y = np.asarray(masks, dtype=np.float64), np.asarray(targets, dtype=np.float64)
    pred = np.empty_like(y)
    for f in np.unique(folds):
        held = folds == f
        w, b = scaled_lasso(X[~held], y[~held], alpha, n_tokens)
        pred[held] = b + X[held] @ w
    return r_squared(y, pred)


@dataclass(frozen=True)
class Surrogate:
    weights: np.ndarray  # (K,) one per source
    intercept: float
    cv_r2: float  # out-of-fold R^2 (NaN when the targets are all equal)


def fit_surrogate(masks: np.ndarray, targets: np.ndarray, alpha: float, n_tokens: int,
                  folds: np.ndarray) -> Surrogate:
    """The weights from all ablations, the fit quality by cross-validation over ``folds``."""
    w, b = scaled_lasso(masks, targets, alpha, n_tokens)
    return Surrogate(w, b, cross_validated_r2(masks, targets, alpha, n_tokens, folds))


def logit_of_probability(log_p: np.ndarray) -> np.ndarray:
    """``log P - log(1 - P)`` from ``log P`` (the package's ``aggregate_logit_probs(..., "logit_prob")``), stable near
    P = 0 and P = 1 (``log(1 - P)`` by ``log1p(-e^x)`` below log 1/2, ``log(-expm1(x))`` above); P = 1 gives inf."""
    x = np.minimum(np.asarray(log_p, dtype=np.float64), 0.0)
    with np.errstate(divide="ignore"):
        log_1m = np.where(x < -np.log(2), np.log1p(-np.exp(x)), np.log(-np.expm1(x)))
    return x - log_1m


# --- ablations ----------------------------------------------------------------------------------------------------

def example_rng(seed: int, input_ids, stream: int = 0) -> np.random.Generator:
    """A generator of its own for one example: the run's seed and a digest of the example's tokens, so the masks do not
    depend on which examples came before, and no global random state is read or changed. ``stream`` > 0 gives an
    independent stream from the same seed (the LDS masks: held out from ContextCite's own ablations)."""
    ids = np.asarray(input_ids, dtype=np.int64).reshape(-1)
    digest = hashlib.sha256(ids.tobytes()).digest()
    words = [int(seed), *np.frombuffer(digest, dtype=np.uint32).tolist()]
    return np.random.default_rng(words + [int(stream)] if stream else words)


def ablation_masks(rng: np.random.Generator, n: int, k: int, keep_prob: float) -> np.ndarray:
    """(n, k) bool: True where a source is kept, each independently with probability ``keep_prob``."""
    return rng.random((n, k)) < keep_prob


@torch.inference_mode()
def deleted_token_logprobs(model, input_ids: torch.Tensor, gen_start: int, deletions: Sequence[torch.Tensor],
                           pad_id: int, batch_size: int, attn_implementation: Optional[str] = "sdpa") -> np.ndarray:
    """log p(y_t) of every generated token (N, G), float64, with each deletion's positions (before ``gen_start``)
    removed from the input: the shortened inputs padded on the left (positions counted from each input's first real
    token), so every row's generated tokens end the batch and only their G logits are projected; ``batch_size``
    inputs per forward pass. A deletion that leaves no token before the generation keeps one ``pad_id`` there, from
    which the first generated token is predicted (a bare prompt with every source removed)."""
    ids = input_ids.reshape(-1)
    targets = ids[gen_start:]
    g = targets.numel()
    seqs = []
    for gone in deletions:
        keep = torch.ones(ids.numel(), dtype=torch.bool, device=ids.device)
        keep[gone] = False
        seq = ids[keep]
        if not keep[:gen_start].any():
            seq = torch.cat([torch.full((1,), pad_id, dtype=ids.dtype, device=ids.device), seq])
        seqs.append(seq)
    if is_endpoint(model):  # the server runs the passes (models.endpoint_lm)
        return model.target_logprobs([s.tolist() for s in seqs], g)
    out = np.empty((len(seqs), g), dtype=np.float64)

    def score(lo: int, hi: int) -> None:
        chunk = [s[:-1] for s in seqs[lo:hi]]  # the last token predicts nothing scored
        width = max(s.numel() for s in chunk)
        batch = torch.zeros((len(chunk), width), dtype=torch.long, device=ids.device)
        mask = torch.zeros_like(batch)
        for r, s in enumerate(chunk):
            batch[r, width - s.numel():] = s
            mask[r, width - s.numel():] = 1
        kw = {"input_ids": batch, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
        out[lo:hi] = scored(model, g, **kw).target_logprobs(targets).double().cpu().numpy()

    with attention_kernel(model, attn_implementation):
        run_in_batches(len(seqs), batch_size, score, what="ablation passes", unit="seq")
    return out


def source_sentences(units: SentenceUnits, ctx) -> list[int]:
    """The prompt sentences that are sources: all but those holding a token of the question the data marks
    (``ctx.query_tokens``), which, as in the package, is not part of the context."""
    query = set(ctx.query_tokens.tolist()) if ctx.query_tokens is not None else set()
    return [u for u, cols in enumerate(units.prompt) if not query.intersection(cols.tolist())]


def dropped_positions(ctx, sources: Sequence[np.ndarray], keeps: Iterable[Sequence[bool]]) -> list[torch.Tensor]:
    """Per mask over ``sources`` (each a source's prompt-token indices, 0..P-1), the absolute positions of the
    tokens of the sources it leaves out (an empty tensor when it keeps them all)."""
    positions = [ctx.prompt_positions[torch.as_tensor(s, device=ctx.prompt_positions.device)] for s in sources]
    return [torch.cat([ctx.prompt_positions[:0]] + [positions[j] for j in np.flatnonzero(~np.asarray(k, dtype=bool))])
            for k in keeps]


# --- the method ---------------------------------------------------------------------------------------------------

@dataclass
class ContextCiteAttributor(Attributor):
    """ContextCite over the prompt's sentences.

    The sources are the prompt's sentences, except those of the question where the data marks it
    (``metadata.question_char_span``): as in the package, the question is not part of the context. ``n_ablations``
    masks (each source kept with probability ``keep_prob``), drawn from ``seed`` and the example's tokens; under each
    the dropped sources are removed (``ablation``: ``delete``, the package's, or ``eos``: their tokens overwritten with
    the pad id) and the sink span (the whole generation without one) is scored, teacher-forced (``target``:
    ``logit_prob``, the logit of its probability, the package's, or ``log_prob``, its summed log-probability). The
    package's LASSO (``alpha``, scaled by the span's token count and each source's mask spread) fitted on all
    ablations gives one weight per source, spread onto its tokens (``copy``: each token the weight; ``share``: an
    equal share) in the rows of the sink span; the question's and generated columns there are 0, other rows NaN. The
    ``cv_folds``-fold cross-validated R^2 and the counts are reported in the result's ``info``.
    """
    log_probs_only: ClassVar[bool] = True

    name: ClassVar[str] = "context_cite"
    n_ablations: int = param(64, ge=2)
    keep_prob: float = param(0.5, gt=0, lt=1)
    alpha: float = param(0.01, ge=0)
    ablation: str = param("delete", choices=ABLATIONS)
    target: str = param("logit_prob", choices=TARGETS)
    cv_folds: int = param(5, ge=2)
    spread: str = param("copy", choices=SPREADS)
    seed: int = 0
    batch_size: int = neutral(4, ge=1)
    forward_attn_impl: Optional[str] = "sdpa"

    def __post_init__(self):
        if self.cv_folds > self.n_ablations:
            raise refuse("cv_folds", self.cv_folds, f"more folds than the {self.n_ablations} ablations")

    def memory_need(self, shape, T, G):
        return ablation_passes(shape, T, G, int(self.batch_size), padded=self.ablation == "delete",
                               impl=self.forward_attn_impl)

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        t0 = time.perf_counter()
        units = SentenceUnits.of(tokenizer, ctx)
        sources = source_sentences(units, ctx)
        rows = np.arange(sink[0], sink[1] + 1) if sink is not None else np.arange(ctx.G)
        A = empty_matrix(ctx.G, ctx.P)
        A[rows] = 0.0
        info = {"ablations": self.n_ablations, "cv_folds": self.cv_folds, "cv_r2": None,
                "prompt_sentences": len(units.prompt), "sources": len(sources), "nonzero_weights": 0}
        if sources:
            rng = example_rng(self.seed, ctx.input_ids.detach().cpu().numpy())
            masks = ablation_masks(rng, self.n_ablations, len(sources), self.keep_prob)
            folds = fold_of(self.n_ablations, self.cv_folds, rng)
            dropped = dropped_positions(ctx, [units.prompt[u] for u in sources], masks)
            log_p = self._token_logprobs(model, tokenizer, ctx, dropped)[:, rows].sum(1)
            y = logit_of_probability(log_p) if self.target == "logit_prob" else log_p
            fit = fit_surrogate(masks, y, self.alpha, len(rows), folds)
            for j, u in enumerate(sources):
                cols = units.prompt[u]
                A[np.ix_(rows, cols)] = spread_onto_tokens(fit.weights[j], cols, self.spread)
            info.update(cv_r2=fit.cv_r2 if np.isfinite(fit.cv_r2) else None,
                        nonzero_weights=int(np.count_nonzero(fit.weights)))
        timings["attribution"] = time.perf_counter() - t0
        return AttributionResult(matrix=A, method=self.name, P=ctx.P, G=ctx.G, rows_written=rows, info=info)

    def _token_logprobs(self, model, tokenizer, ctx, dropped: list[torch.Tensor]) -> np.ndarray:
        if self.ablation == "delete":
            return deleted_token_logprobs(model, ctx.input_ids, ctx.gen_start, dropped, eos_id(tokenizer),
                                          self.batch_size, self.forward_attn_impl)
        _, logp = ablated_token_scores(model, ctx.input_ids, ctx.gen_start, dropped, eos_id(tokenizer),
                                       self.batch_size, "logprob", self.forward_attn_impl)
        return logp
