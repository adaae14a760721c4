"""Baselines (docs/attribution.md, "Baselines"): last-layer attention, input x gradient, integrated gradients, random.

Row t explains generated token t, read at the position that predicts it (gen_start + t - 1); its columns are the
prompt tokens and the generated tokens before t (the causal past), other columns 0. Only the rows the caller reads
are computed (``InputContext.rows``); the others are NaN.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Iterator, Optional

import numpy as np
import torch

from ctxbench.attribution.base import AttributionResult, Attributor, causal_column_mask, empty_matrix
from ctxbench.attribution.capture import capture
from ctxbench.attribution.context_cite import example_rng
from ctxbench.attribution.ifr import IFRConfig, LayerView
from ctxbench.attribution.memory import (Need, eager_attention, forward_transient, ifr_capture, result_matrix,
                                         saved_for_backward, scored_logits)
from ctxbench.utils import progress as progress_display
from ctxbench.utils.batching import run_in_batches
from ctxbench.utils.files import atomic_write
from ctxbench.models.attention import attention_kernel
from ctxbench.models.logits import predicting_logits
from ctxbench.core.part import neutral, param
from ctxbench.utils.tokens import eos_id

log = logging.getLogger(__name__)


@dataclass
class _Baseline(Attributor):
    def _finish(self, ctx, full: torch.Tensor, timings, t0) -> AttributionResult:
        """full: (R, T) scores of the rows ``ctx.row_indices()`` over absolute positions -> causal (G, P+G) matrix,
        NaN in the rows not computed."""
        rows = ctx.row_indices()
        A = empty_matrix(ctx.G, ctx.P)
        A[rows] = np.where(causal_column_mask(ctx.P, ctx.G)[rows], ctx.to_columns(full).detach().float().cpu().numpy(),
                           0.0)
        timings["attribution"] = time.perf_counter() - t0
        return AttributionResult(matrix=A, method=self.name, P=ctx.P, G=ctx.G, rows_written=rows)


def _predicting_rows(ctx, rows: Optional[np.ndarray] = None) -> torch.Tensor:
    """Positions that predict generated tokens ``rows`` (all when None)."""
    t = torch.arange(ctx.G, device=ctx.input_ids.device) if rows is None else \
        torch.as_tensor(rows, device=ctx.input_ids.device)
    return ctx.gen_start - 1 + t


_ROW_CHUNK = 64  # the attention baseline's rows formed at once


@dataclass
class AttentionAttributor(_Baseline):
    """Head-mean attention of layer ``layer`` (the last: -1), recomputed from one captured pass.
    ``times_ig``: multiply by integrated gradients (``ig_steps`` points, ``ig_batch`` per forward pass, attention
    kernel ``attn_implementation`` for them)."""

    name: ClassVar[str] = "attention"
    layer: int = -1
    times_ig: bool = False
    ig_steps: int = param(20, ge=2)
    ig_batch: int = neutral(4, ge=1)
    attn_implementation: Optional[str] = "sdpa"

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        t0 = time.perf_counter()
        rows = _predicting_rows(ctx, ctx.row_indices())
        with torch.no_grad():
            cap = capture(model, ctx.input_ids, int(rows[0]))
            timings["capture"] = cap.seconds
            li = self.layer % len(cap.layers)
            lv = LayerView(cap, li, IFRConfig())
            full = torch.cat([lv.attn_rows(rows[i:i + _ROW_CHUNK], scaled=False).mean(0)
                              for i in range(0, rows.numel(), _ROW_CHUNK)])
        if self.times_ig:
            full = full * _integrated_gradients(model, ctx, tokenizer, self.ig_steps, self.ig_batch,
                                                self.attn_implementation)
        return self._finish(ctx, full, timings, t0)

    def memory_need(self, shape, T, G):
        # the capture of the generated rows on the loaded kernel (eager in run_exp: one layer's T x T matrices at a
        # time), _ROW_CHUNK of their attention rows at a time, the result
        need = Need(ifr_capture(shape, T, G) + forward_transient(shape, T) + eager_attention(shape, T, None)
                    + _ROW_CHUNK * T * shape.heads * 4 + result_matrix(T, G), f"the capture of {shape.layers} layers")
        if self.times_ig:
            need += gradient_need(shape, T, G, self.ig_batch, self.attn_implementation)
        return need


def _grad_x_input(model, embeds: torch.Tensor, ctx, ref: torch.Tensor, attn_impl: Optional[str]) -> torch.Tensor:
    """For a batch of input embeddings (B, T, d): sum over the batch of grad_e log p(y_t) . ref, per generated token t
    of ``ctx.row_indices()``. Returns (R, T) (``_row_contributions`` with every row and point)."""
    out = torch.zeros(len(ctx.row_indices()), ctx.T, device=embeds.device)
    for i, contribution in _row_contributions(model, embeds, ctx, ref, attn_impl):
        out[i] = contribution
    return out


def _row_contributions(model, embeds: torch.Tensor, ctx, ref: torch.Tensor, attn_impl: Optional[str],
                       need: Optional[torch.Tensor] = None, what: str = "") -> Iterator[tuple[int, torch.Tensor]]:
    """``(i, sum over the batch of grad_e log p(y_t) . ref)`` for each explained row i (token t of
    ``ctx.row_indices()``), one row at a time; ``need`` (R, B) keeps, per row, only the batch points it still needs
    (a row needing none is skipped).

    One forward per batch, then one backward per token explained (graph retained), because each token is a separate
    output to explain; yielding row by row lets a long batch show progress and keep what it summed when stopped. The
    pass runs on ``attn_impl`` (a fused kernel keeps no T x T matrix per layer for the backward passes; the gradients
    are the same up to rounding).
    """
    rows = ctx.row_indices()
    todo = list(range(len(rows))) if need is None else [i for i in range(len(rows)) if bool(need[i].any())]
    if not todo:
        return
    targets = ctx.input_ids[ctx.gen_start:]
    embeds = embeds.detach().requires_grad_(True)
    with attention_kernel(model, attn_impl):
        logits = predicting_logits(model, ctx.gen_start, inputs_embeds=embeds)  # (B, G, V)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.view(1, -1, 1).expand(embeds.shape[0], -1, 1))
    logp = logp.squeeze(-1).sum(0)  # (G,): batch elements are independent, so their gradients just add up
    with progress_display.bar(len(todo), what or "gradient rows", "row") as bar:
        for n, i in enumerate(todo):
            (g,) = torch.autograd.grad(logp[rows[i]], embeds, retain_graph=n < len(todo) - 1)
            r = ref if need is None else ref * need[i].to(ref.dtype).view(-1, 1, 1)
            bar.update(1)
            yield i, (g.float() * r).sum(-1).sum(0)


def _integrated_gradients(model, ctx, tokenizer, steps: int, batch: int, attn_impl: Optional[str],
                          partial_dir: Optional[str] = None) -> torch.Tensor:
    """IG with the EOS embedding at every position as baseline; trapezoid rule over ``steps`` points in [0, 1],
    ``batch`` points per forward pass (fewer after a CUDA out-of-memory error). ``partial_dir``: the sum so far is
    kept there (``PartialSum``: per explained row, the points summed), after each batch, every
    ``PartialSum.EVERY_S`` seconds within one, and when the run is stopped; a call on the same input resumes from it,
    mid-batch included."""
    emb = model.get_input_embeddings()
    with torch.no_grad():
        x = emb(ctx.input_ids.view(1, -1)).float()
        x0 = emb(torch.full_like(ctx.input_ids.view(1, -1), eos_id(tokenizer))).float()
    alphas = torch.linspace(0, 1, steps, device=x.device)
    wts = torch.full((steps,), 1.0 / max(1, steps - 1), device=x.device)
    wts[0] /= 2
    wts[-1] /= 2
    dtype = next(model.parameters()).dtype
    R = len(ctx.row_indices())
    total = torch.zeros(R, ctx.T, device=x.device)
    kept = PartialSum.for_input(partial_dir, model, ctx, steps, attn_impl) if partial_dir else None
    done = kept.load(total, steps) if kept else torch.zeros(R, steps, dtype=torch.bool)

    def points(lo: int, hi: int) -> None:
        need = ~done[:, lo:hi]  # a resumed run may have summed some points of some rows (another ig_batch, a stop)
        cols = need.any(0)
        if not bool(cols.any()):
            return
        idx = [lo + int(j) for j in torch.nonzero(cols).view(-1)]
        a = alphas[idx].view(-1, 1, 1)
        # the step weight is folded into the reference vector so one backward serves the whole batch
        pts = (x0 + a * (x - x0)).to(dtype)
        ref = (x - x0) * wts[idx].view(-1, 1, 1)
        try:
            for i, contribution in _row_contributions(model, pts, ctx, ref, attn_impl, need[:, cols].to(x.device),
                                                      what=f"integrated gradients, points {lo + 1}-{hi} of {steps}"):
                total[i].add_(contribution)
                done[i, idx] = True
                if kept:
                    kept.save(total, done, now=False)
        finally:  # after the batch, and when stopped (a SIGTERM, Ctrl-C): what was summed is kept
            if kept:
                kept.save(total, done)

    run_in_batches(steps, batch, points, what="integrated gradients", unit="point")  # halves on CUDA out-of-memory
    if kept:
        kept.remove()
    return total


@dataclass
class PartialSum:
    """IG's sum over the integration points done so far for one input, in a file of ``partial_dir`` named by what
    the sum depends on (model, input ids, rows, points, kernel), with which points each explained row has summed:
    on a CPU one example of a chain-of-thought target (40-100 explained rows, a backward pass per row and batch of
    points) takes hours, longer than a lane may run at a time, and one batch of points takes minutes; a lane stopped
    mid-example, or mid-batch, resumes from its last summed row. Written atomically, removed when the example is
    done."""

    EVERY_S: ClassVar[float] = 30.0  # within a batch, at most this long between two saves

    path: Path
    saved_at: float = 0.0

    @staticmethod
    def for_input(partial_dir: str, model, ctx, steps: int, attn_impl: Optional[str]) -> "PartialSum":
        h = hashlib.sha256()
        for part in (str(getattr(model.config, "_name_or_path", "")), str(next(model.parameters()).dtype),
                     str(steps), str(attn_impl)):
            h.update(part.encode() + b"\0")
        h.update(ctx.input_ids.detach().cpu().numpy().astype(np.int64).tobytes())
        h.update(np.asarray(ctx.row_indices(), dtype=np.int64).tobytes())
        return PartialSum(Path(partial_dir) / f"ig-{h.hexdigest()[:24]}.pt", time.monotonic())

    def load(self, total: torch.Tensor, steps: int) -> torch.Tensor:
        """Which points each row has summed, (rows, steps) (their sum added to ``total``); none without a file. A
        file written before rows were tracked lists whole points (``done``), summed for every row."""
        done = torch.zeros(total.shape[0], steps, dtype=torch.bool)
        if not self.path.exists():
            return done
        saved = torch.load(self.path, map_location=total.device)
        total.add_(saved["total"])
        if "rows_done" in saved:
            done |= saved["rows_done"].to(torch.bool).cpu()
        else:
            done[:, list(saved["done"])] = True
        log.info("integrated gradients: resuming from %d of the %d (row, point) sums (%s)", int(done.sum()),
                 done.numel(), self.path)
        return done

    def save(self, total: torch.Tensor, done: torch.Tensor, now: bool = True) -> None:
        """Keep the sum (``now=False``: only when the last save is ``EVERY_S`` old)."""
        if not now and time.monotonic() - self.saved_at < self.EVERY_S:
            return
        atomic_write(self.path, lambda f: torch.save({"total": total.detach().cpu(), "rows_done": done.clone()}, f))
        self.saved_at = time.monotonic()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


@contextlib.contextmanager
def explaining(model) -> Iterator[None]:
    """Eval mode and no parameter gradients (gradient methods need the input's only) inside the block; the model's
    mode and ``requires_grad`` flags as before after it."""
    was_training = model.training
    req = [p.requires_grad for p in model.parameters()]
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, r in zip(model.parameters(), req):
            p.requires_grad_(r)
        model.train(was_training)


def gradient_need(shape, T: int, G: int, batch: int, attn_impl: Optional[str]) -> Need:
    """A forward pass of ``batch`` inputs kept for the backward passes (on ``attn_impl``), their scored logits with
    gradients, the (rows x T) result."""
    return Need(saved_for_backward(shape, T, batch) + eager_attention(shape, T, attn_impl, batch, kept=True)
                + scored_logits(shape, G, batch, copies=3) + result_matrix(T, G),
                f"the activations of {shape.layers} layers kept for the backward pass")


@dataclass
class _GradBaseline(_Baseline):
    """``attn_implementation``: the attention kernel of the gradient passes ("sdpa"; None keeps the loaded one)."""

    attn_implementation: Optional[str] = "sdpa"

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        t0 = time.perf_counter()
        with explaining(model):
            full = self._scores(model, tokenizer, ctx)
        return self._finish(ctx, full, timings, t0)


@dataclass
class InputXGradientAttributor(_GradBaseline):
    name: ClassVar[str] = "input_x_gradient"

    def memory_need(self, shape, T, G):
        return gradient_need(shape, T, G, 1, self.attn_implementation)

    def _scores(self, model, tokenizer, ctx):
        x = model.get_input_embeddings()(ctx.input_ids.view(1, -1))
        return _grad_x_input(model, x, ctx, x.detach().float(), self.attn_implementation)


@dataclass
class IntegratedGradientsAttributor(_GradBaseline):
    """``ig_steps`` interpolation points from the EOS-embedding baseline; ``ig_batch`` points per forward pass;
    ``partial_dir``: a folder where an example's sum so far is kept after each batch, so that a stopped run resumes
    mid-example (``PartialSum``)."""

    name: ClassVar[str] = "integrated_gradients"
    ig_steps: int = param(20, ge=2)
    ig_batch: int = neutral(4, ge=1)
    partial_dir: Optional[str] = neutral(None)

    def memory_need(self, shape, T, G):
        return gradient_need(shape, T, G, min(int(self.ig_batch), int(self.ig_steps)), self.attn_implementation)

    def _scores(self, model, tokenizer, ctx):
        return _integrated_gradients(model, ctx, tokenizer, self.ig_steps, self.ig_batch, self.attn_implementation,
                                     self.partial_dir)


@dataclass
class RandomAttributor(_Baseline):
    """Uniform [0, 1) scores on the causal past, from ``seed`` mixed with the input ids, so the same example always
    gets the same matrix (the config passes the run's top-level ``seed``).

    One draw per unit a metric scores: per token in the matrix (RISE, MAS, recovery), and per source for the
    source-level metrics (LDS, top-k drop: ``AttributionResult.source_scores``), from the same seed and ids in a
    stream of its own. Summing uniform token noise over a sentence would rank sentences by length, a prior
    (the ``length`` control), not chance."""

    name: ClassVar[str] = "random"
    needs_model: ClassVar[bool] = False
    seed: int = 0

    def memory_need(self, shape, T, G):
        return Need(2 * result_matrix(T, G), "the result matrix")

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        t0 = time.perf_counter()
        ids = ctx.input_ids.detach().cpu().numpy().astype(np.uint64)
        rng = np.random.default_rng([int(self.seed), int(ids.sum() % (1 << 63)), ids.size])
        full = torch.as_tensor(rng.random((ctx.G, ctx.T), dtype=np.float32)[ctx.row_indices()],
                               device=ctx.input_ids.device)
        res = self._finish(ctx, full, timings, t0)
        res.source_scores = per_source_uniform(int(self.seed), ids.astype(np.int64))
        return res


RANDOM_SOURCE_STREAM = 0x524E44  # "RND": the per-source draws' stream, apart from the LDS masks' and ContextCite's


def per_source_uniform(seed: int, input_ids) -> Callable[[list[np.ndarray]], np.ndarray]:
    """A source rule (``AttributionResult.source_scores``): an independent uniform [-1, 1) draw per source, from
    ``seed`` and a digest of the example's tokens (``context_cite.example_rng``); the same draws on every call.

    Centred, so that its expected LDS is 0: scores all >= 0 would predict "more sources kept, higher target", which
    the model's targets mostly follow (a prior of its own). Top-k ranks the same as with [0, 1) draws."""
    ids = np.asarray(input_ids, dtype=np.int64).reshape(-1).copy()
    return lambda sources: 2.0 * example_rng(seed, ids, stream=RANDOM_SOURCE_STREAM).random(len(sources)) - 1.0
