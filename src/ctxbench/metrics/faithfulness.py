"""Token-level faithfulness by guided deletion: RISE, MAS and RISE+AP (docs/metrics.md; lower is better).

Prompt tokens are ranked by their attribution weight ``w`` and deleted (replaced by the pad id, the EOS id) in
K = min(20, P) cumulative blocks; ``s_t`` is the log-probability of the generated tokens after t blocks are gone.

All views of one example are scored together: every distinct perturbed input (keyed by the set of deleted prompt tokens)
is run once, several per forward pass, and views with the same blocks share their curves. The step-0 input (nothing
deleted) and the last one (every rankable token deleted) are common to all views, and the scorer keeps the scores of
the example's inputs for the next method it scores on the same example (the step-0 input is common to all methods,
the last one to all methods with the same rankable tokens): up to 2 of each method's 21 inputs after the first.

The mode's figure, the mean normalised deletion curve per view and method, is drawn by ``reporting.curves``.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Optional, Protocol, Sequence

import numpy as np
import torch

from ctxbench.attribution.base import stop_mask
from ctxbench.attribution.memory import Need, scoring_passes
from ctxbench.utils.batching import run_in_batches
from ctxbench.metrics.scorer import Metric, Scorer
from ctxbench.models.attention import attention_kernel
from ctxbench.models.endpoint_lm import is_endpoint
from ctxbench.models.logits import predicting_scores
from ctxbench.core.part import neutral, param, refuse
from ctxbench.utils.tokens import eos_id

log = logging.getLogger(__name__)

MAX_STEPS = 20
METRIC_NAMES = ("RISE", "MAS", "RISE+AP")


class _ModelInputLike(Protocol):
    """What the scorer needs of ``ctxbench.prompts.formats.ModelInput``."""

    input_ids: torch.Tensor  # (T,): formatted prompt, then the G generated tokens
    prompt_positions: torch.Tensor  # (P,)
    gen_start: int


# ----------------------------------------------------------------------------------------------------------------------
# Deletion schedule and density


@dataclass(frozen=True)
class DeletionSchedule:
    """The blocks of prompt-token indices (0..P-1) deleted at steps 1..K, in order, and the density curve (K+1)."""

    blocks: tuple[np.ndarray, ...]
    density: np.ndarray

    @property
    def steps(self) -> int:
        return len(self.blocks)


def _as_weights(w) -> np.ndarray:
    arr = np.asarray(w, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(arr)):
        # Views already map NaN to 0 (docs/attribution.md, token views); a NaN here is a bug upstream, and it would make
        # the ranking arbitrary.
        raise ValueError("attribution weights contain NaN or inf")
    return arr


def _rankable_indices(P: int, rank_mask) -> np.ndarray:
    if rank_mask is None:
        return np.arange(P)
    mask = np.asarray(rank_mask, dtype=bool).reshape(-1)
    if mask.shape[0] != P:
        raise ValueError(f"rank_mask has {mask.shape[0]} entries for {P} prompt tokens")
    return np.flatnonzero(mask)


def deletion_order(w, rank_mask=None) -> np.ndarray:
    """Rankable prompt indices by descending weight; equal weights keep position order (a stable sort), so the
    schedule is reproducible across runs and platforms."""
    w = _as_weights(w)
    idx = _rankable_indices(w.shape[0], rank_mask)
    return idx[np.argsort(-w[idx], kind="stable")]


def block_sizes(n: int, max_steps: int = MAX_STEPS) -> list[int]:
    """K = min(max_steps, n) sizes: floor(n / K) each, one more for the first n mod K blocks."""
    if n <= 0:
        return []
    k = min(max_steps, n)
    base, extra = divmod(n, k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def density_curve(w, blocks: Sequence[np.ndarray], rank_mask=None) -> np.ndarray:
    """``d_0 = 1, d_{t+1} = d_t - mass(block t) / sum w`` over the rankable tokens; linspace 1 -> 0 when sum w <= 0."""
    w = _as_weights(w)
    k = len(blocks)
    total = float(w[_rankable_indices(w.shape[0], rank_mask)].sum())
    if total <= 0:
        return np.linspace(1.0, 0.0, k + 1)
    masses = np.array([w[b].sum() for b in blocks], dtype=np.float64)
    # The running subtraction written as 1 - cumulative mass: same values, without drift over the steps.
    return np.concatenate([[1.0], 1.0 - np.cumsum(masses) / total])


def deletion_schedule(w, rank_mask=None, max_steps: int = MAX_STEPS) -> DeletionSchedule:
    order = deletion_order(w, rank_mask)
    bounds = np.cumsum([0] + block_sizes(order.shape[0], max_steps))
    blocks = tuple(order[a:b] for a, b in zip(bounds[:-1], bounds[1:]))
    return DeletionSchedule(blocks=blocks, density=density_curve(w, blocks, rank_mask))


# ----------------------------------------------------------------------------------------------------------------------
# Scores from a deletion curve


def auc(a) -> float:
    """Trapezoidal area on a unit x-range: ``(sum a - a_0/2 - a_K/2) / K``; NaN when there is no step (K = 0)."""
    a = np.asarray(a, dtype=np.float64)
    k = a.shape[0] - 1
    if k < 1:
        return float("nan")
    return float((a.sum() - a[0] / 2 - a[-1] / 2) / k)


def normalized_curve(scores) -> np.ndarray:
    """``n_t = min_{u<=t} clip((s_u - s_K) / |s_0 - s_K|, 0, 1)``.

    Flat curve (``s_0 = s_K``): a step above s_K counts 1, below 0, equal carries no evidence and leaves the running
    minimum where it was (which starts at 1), as in FlashTrace's code where those entries are inf/-inf/NaN. A flat
    curve therefore scores RISE = 1, the worst: deleting the ranked tokens did not lower the probability.
    """
    s = np.asarray(scores, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (s - s[-1]) / abs(s[0] - s[-1])
    r = np.where(np.isnan(r), 1.0, np.clip(r, 0.0, 1.0))
    return np.minimum.accumulate(r)


def _alignment_penalty(n: np.ndarray, density) -> np.ndarray:
    d = np.asarray(density, dtype=np.float64)
    if d.shape != n.shape:
        raise ValueError(f"density has {d.shape[0]} points for a curve of {n.shape[0]}")
    return np.abs(n - d)


def rise(scores) -> float:
    return auc(normalized_curve(scores))


def mas(scores, density) -> float:
    """Magnitude Aligned Scoring: ``c = clip(n + |n - d|, 0, 1)`` min-max rescaled (linspace 1 -> 0 when c is flat)."""
    n = normalized_curve(scores)
    c = np.clip(n + _alignment_penalty(n, density), 0.0, 1.0)
    span = c.max() - c.min()
    c = (c - c.min()) / span if span > 0 else np.linspace(1.0, 0.0, c.shape[0])
    return auc(c)


def rise_ap(scores, density) -> float:
    n = normalized_curve(scores)
    return auc(n + _alignment_penalty(n, density))


def curve_metrics(scores, density) -> dict[str, float]:
    return {"RISE": rise(scores), "MAS": mas(scores, density), "RISE+AP": rise_ap(scores, density)}


# ----------------------------------------------------------------------------------------------------------------------
# Log-probabilities of the generation under deletions


def _model_device(model) -> torch.device:
    return next(model.parameters()).device


def _check_input(model_input: _ModelInputLike) -> tuple[torch.Tensor, int, int]:
    ids = torch.as_tensor(model_input.input_ids).reshape(-1)
    gen_start = int(model_input.gen_start)
    if not 0 < gen_start < ids.shape[0]:
        raise ValueError(f"gen_start={gen_start} must leave a non-empty prefix and at least one generated token "
                         f"(input has {ids.shape[0]} tokens)")
    return ids, gen_start, ids.shape[0] - gen_start


@torch.inference_mode()
def sequence_logprobs(model, sequences: torch.Tensor, gen_start: int, batch_size: int = 8,
                      stats: Optional[dict] = None) -> np.ndarray:
    """Sum over the tokens ``sequences[:, gen_start:]`` of log p(token | prefix), teacher-forced, for N equal-length
    sequences; at most ``batch_size`` sequences per forward pass (fewer after an out-of-memory error). Returns float64
    (N,). ``stats``, when given, receives ``forward_passes`` (completed) and ``oom_retries`` (passes abandoned on
    out-of-memory)."""
    n = sequences.shape[0]
    if is_endpoint(model):  # the server runs the passes (models.endpoint_lm)
        if stats is not None:
            stats.update(forward_passes=0, oom_retries=0)
        return model.target_logprobs(sequences.tolist(), sequences.shape[1] - gen_start).sum(-1)
    device = _model_device(model)
    out = np.empty(n, dtype=np.float64)

    def score(lo: int, hi: int) -> None:
        batch = sequences[lo:hi].to(device)
        lp = predicting_scores(model, gen_start, batch).target_logprobs(batch[:, gen_start:])
        out[lo:hi] = lp.double().sum(-1).cpu().numpy()

    # A long prompt on a small GPU: the batch halves on out-of-memory instead of failing the run.
    batches = run_in_batches(n, batch_size, score, what="deletion passes", unit="seq")
    if stats is not None:
        stats.update(forward_passes=batches.passes, oom_retries=batches.retries)
    return out


def _perturbed(ids: torch.Tensor, positions: torch.Tensor, deleted: np.ndarray, pad_id: int) -> torch.Tensor:
    seq = ids.clone()
    if deleted.size:
        seq[positions[torch.as_tensor(deleted, dtype=torch.long)]] = pad_id
    return seq


def _cumulative_sets(blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Deleted prompt indices after 0..K steps (sorted, so equal sets compare equal whatever the order in a block)."""
    sets = [np.empty(0, dtype=np.int64)]
    for b in blocks:
        sets.append(np.union1d(sets[-1], np.asarray(b, dtype=np.int64)))
    return sets


def deletion_scores(model, model_input: _ModelInputLike, blocks_list: Sequence[np.ndarray], pad_id: int,
                    batch_size: int = 8, attn_implementation: Optional[str] = "sdpa") -> np.ndarray:
    """``s_0..s_K`` for one deletion schedule: the blocks (prompt-token indices) are deleted cumulatively."""
    curves, _ = _score_deletion_sets(model, model_input, {"_": _cumulative_sets(blocks_list)}, pad_id, batch_size,
                                     attn_implementation)
    return curves["_"]


def _score_deletion_sets(model, model_input, sets_by_key: Mapping[str, list[np.ndarray]], pad_id: int,
                         batch_size: int, attn_implementation: Optional[str],
                         known: Optional[dict[bytes, float]] = None) -> tuple[dict[str, np.ndarray], dict]:
    """Score every distinct deleted set once, all keys batched together; returns curves per key and counts.
    ``known``: scores of deleted sets of this same input already run (by ``set.tobytes()``); they are not run again,
    and the new ones are added to it."""
    ids, gen_start, _ = _check_input(model_input)
    positions = torch.as_tensor(model_input.prompt_positions, dtype=torch.long).reshape(-1)
    if positions.numel() and (int(positions.max()) >= gen_start or int(positions.min()) < 0):
        raise ValueError("prompt_positions must lie before gen_start")
    distinct: dict[bytes, np.ndarray] = {}  # in first-seen order
    for sets in sets_by_key.values():
        for s in sets:
            distinct.setdefault(s.tobytes(), s)
    known = {} if known is None else known
    todo = [s for b, s in distinct.items() if b not in known]
    passes: dict = {"forward_passes": 0}
    if todo:
        sequences = torch.stack([_perturbed(ids, positions, s, pad_id) for s in todo])
        with attention_kernel(model, attn_implementation):
            values = sequence_logprobs(model, sequences, gen_start, batch_size, stats=passes)
        known.update(zip((s.tobytes() for s in todo), values.tolist()))
    curves = {k: np.array([known[s.tobytes()] for s in sets], dtype=np.float64) for k, sets in sets_by_key.items()}
    requested = sum(len(sets) for sets in sets_by_key.values())
    # The passes actually run: more than ceil(distinct / batch_size) once out-of-memory halved the batch.
    stats = {"sequences": len(todo), "reused": len(distinct) - len(todo), "requested": requested,
             "forward_passes": passes["forward_passes"]}
    return curves, stats


def faithfulness_for_views(model, model_input: _ModelInputLike, view_weights: Mapping[str, Any], pad_id: int,
                           rank_mask=None, batch_size: int = 8, max_steps: int = MAX_STEPS,
                           attn_implementation: Optional[str] = "sdpa",
                           stats: Optional[dict] = None,
                           known: Optional[dict[bytes, float]] = None) -> dict[str, dict[str, Any]]:
    """RISE, MAS, RISE+AP, the score curve and the density for each view's prompt weights (length P each).

    ``rank_mask`` (P bools, True = rankable) restricts ranking and deletion to those tokens (stop-word methods).
    ``stats``, when given, receives the counts of distinct sequences run, those taken from ``known`` (the scores of
    this input's deleted sets from an earlier call, which the new ones are added to), sequences requested and forward
    passes. With no rankable token the metrics are NaN (undefined, not "perfect").
    """
    P = int(torch.as_tensor(model_input.prompt_positions).numel())
    schedules = {}
    for view, w in view_weights.items():
        w = _as_weights(w)
        if w.shape[0] != P:
            raise ValueError(f"view {view!r}: {w.shape[0]} weights for {P} prompt tokens")
        schedules[view] = deletion_schedule(w, rank_mask, max_steps)
    curves, counts = _score_deletion_sets(model, model_input,
                                          {v: _cumulative_sets(s.blocks) for v, s in schedules.items()},
                                          pad_id, batch_size, attn_implementation, known)
    if stats is not None:
        stats.update(counts)
    results = {}
    for view, sched in schedules.items():
        scores = curves[view]
        results[view] = {**curve_metrics(scores, sched.density), "curve": scores.tolist(),
                         "density": sched.density.tolist()}
    return results


# Common deletion sets: what every method deletes when it is scored under one set (``common_sets``).
COMMON_SETS = {"all": "every prompt token", "nonstop": "the non-stop prompt tokens"}
COMMON_METRICS = ("RISE", "MAS")


def common_key(metric: str, deletion_set: str) -> str:
    return f"{metric}@{deletion_set}"


@dataclass
class FaithfulnessScorer(Scorer):
    """Mode ``faithfulness``: RISE, MAS and RISE+AP by guided deletion (docs/metrics.md); lower is better.

    ``steps``: deletion steps (K = min(steps, P)); ``batch_size``: perturbed inputs per forward pass (CPU 1-4, GPU
    more). The main figures use each method's own deletion set, as the FlashTrace paper's Table 1 does: a method that
    removes stop tokens (FlashTrace) never deletes them, every other method deletes every prompt token. ``common_sets``
    (``all``, ``nonstop``) also scores every method under one set for all, as RISE@<set> and MAS@<set>: ``all`` deletes
    every prompt token, ``nonstop`` only the non-stop ones (whatever the method returned). Each view record names the
    method's own set (``deletion_set``), and RISE@<set> / MAS@<set> of a method whose own set is <set> are its main
    figures (the same deletions, the same passes): a table that compares methods reads the @<set> columns, where
    every row is scored under one protocol.
    """
    log_probs_only: ClassVar[bool] = True

    name: ClassVar[str] = "faithfulness"
    title: ClassVar[str] = "Faithfulness"
    # FlashTrace's CSV stores the standard deviation under "Var"; kept for its readers
    csv_std_label: ClassVar[str] = "Var"
    steps: int = param(MAX_STEPS, ge=1)
    batch_size: int = neutral(4, ge=1)
    common_sets: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.common_sets = list(self.common_sets)
        bad = [c for c in self.common_sets if c not in COMMON_SETS]
        if bad or len(set(self.common_sets)) < len(self.common_sets):
            raise refuse("common_sets", self.common_sets, f"each of {', '.join(COMMON_SETS)}, at most once")
        self._memo: tuple = (None, None, {})  # (the model, the input, its deleted sets' scores): see the module notes

    def _known(self, model, model_input, pad_id: int) -> dict[bytes, float]:
        """The scores already run for this model and input (the example scored last), else a fresh memo for it."""
        key = (pad_id, int(model_input.gen_start), torch.as_tensor(model_input.input_ids).cpu().numpy().tobytes(),
               torch.as_tensor(model_input.prompt_positions).cpu().numpy().tobytes())
        ref, last, known = self._memo
        if ref is None or ref() is not model or last != key:
            known = {}
            self._memo = (weakref.ref(model), key, known)
        return known

    def memory_need(self, shape, T, G):
        return Need(scoring_passes(shape, T, G, int(self.batch_size)),
                    f"{self.batch_size} deletion passes at a time and their logits over {shape.vocab:,} tokens")

    def metrics(self) -> list[Metric]:
        return self._metrics(COMMON_SETS)

    def csv_metrics(self) -> list[Metric]:
        # FlashTrace's columns, then the common sets this run scored (a method's own set alone adds nothing new)
        return self._metrics(self.common_sets)

    @staticmethod
    def _metrics(sets) -> list[Metric]:
        return [Metric(m, m, higher_is_better=False) for m in METRIC_NAMES] + [
            Metric(common_key(m, c), common_key(m, c), higher_is_better=False) for c in sets for m in COMMON_METRICS]

    def score(self, model, tokenizer, prepared, result, weights):
        mi = prepared.model_input
        rank_mask = None if result.prompt_stop_mask is None else ~np.asarray(result.prompt_stop_mask, dtype=bool)
        stats: dict = {}
        pad = eos_id(tokenizer)
        known = self._known(model, mi, pad)
        scores = faithfulness_for_views(model, mi, weights, pad_id=pad, rank_mask=rank_mask,
                                        batch_size=self.batch_size, max_steps=self.steps, stats=stats, known=known)
        for rec in scores.values():
            rec["deletion_set"] = "all" if rank_mask is None else "nonstop"
        for c in self.common_sets:
            # sets a method's own schedule already deleted come from the memo: "all" costs nothing extra for the
            # methods without a stop mask, "nonstop" nothing for FlashTrace
            mask = None if c == "all" else ~self._stop_mask(tokenizer, mi, result)
            extra: dict = {}
            common = faithfulness_for_views(model, mi, weights, pad_id=pad, rank_mask=mask,
                                            batch_size=self.batch_size, max_steps=self.steps, stats=extra, known=known)
            for view, rec in common.items():
                scores[view].setdefault("common", {})[c] = {k: rec[k] for k in (*METRIC_NAMES, "curve")}
            stats[f"common_{c}"] = extra
        return {self.name: scores, "faithfulness_stats": stats}

    @staticmethod
    def _stop_mask(tokenizer, model_input, result) -> np.ndarray:
        if result.prompt_stop_mask is not None:
            return np.asarray(result.prompt_stop_mask, dtype=bool)
        ids = torch.as_tensor(model_input.input_ids)[torch.as_tensor(model_input.prompt_positions)]
        return stop_mask(tokenizer, ids)

    def values(self, view_record):
        if view_record is None:
            return None
        out = {m: view_record[m] for m in METRIC_NAMES}
        for c in COMMON_SETS:
            got = under_set(view_record, c)
            out.update({common_key(m, c): None if got is None else got[m] for m in COMMON_METRICS})
        return out


def under_set(view_record: Mapping[str, Any], deletion_set: str) -> Optional[Mapping[str, Any]]:
    """A view record's figures under one deletion set: its ``common`` entry, else its main figures when the method's
    own set is that set (the same deletions), else None (not scored under it)."""
    got = (view_record.get("common") or {}).get(deletion_set)
    if got is None and view_record.get("deletion_set") == deletion_set:
        got = view_record
    return got


def with_deletion_set(record: dict, own: str, field: str = "faithfulness") -> dict:
    """``record`` with ``deletion_set`` set to ``own`` in the view records that do not name it (lines written before
    the scorer recorded it; the caller knows the method's own set from its class, ``Attributor.deletion_set``)."""
    views = record.get(field)
    if not views or all(v is None or "deletion_set" in v for v in views.values()):
        return record
    return {**record, field: {v: rec if rec is None or "deletion_set" in rec else {**rec, "deletion_set": own}
                              for v, rec in views.items()}}
