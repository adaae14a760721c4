"""IFR core (docs/attribution.md, "Per-token IFR", "Span IFR"): per-head, per-source contributions of the attention
block and their proximities.

For layer l, sink i, source j, head h: ``f_j^h = v_j^h W_O^h``, ``c_ij^h = alpha_ij^h f_j^h`` and
``x_mid_i = x_prev_i + sum_{j,h} c_ij^h + b_O``. ``prox(z, y) = max(0, |y|_1 - |y - z|_1)``.

Memory: attention probabilities are only ever formed for a chunk of sink rows of one layer (H x rows x T); head
outputs ``f`` are kept for one layer (H x T x d) when that fits ``f_cache_bytes``, else rebuilt per source chunk; the
per-token path never holds more than ``chunk_elems`` elements of the (heads x sinks x sources x d) difference tensor.

Speed (span IFR): the overshoot term ``s.clamp(c - y)`` is exactly 0 for a (source, head) pair whose contribution
cannot exceed the sink in any coordinate, and a bound says which pairs can: ``|f_jk^h| <= |v_j^h|_2 |W_O^h[:, k]|_2``
(Cauchy-Schwarz), so coordinate k of pair (j, h) can overshoot only if ``a_j^h |v_j^h|_2 |W_O^h[:, k]|_2 > |y_k|``.
Only the pairs and coordinates that pass are computed (on SmolLM2 at 1k tokens 3-9% of the H x T x d block); the
others are the exact zeros the full computation would give. The bound carries a relative margin far above the
rounding of ``f``, so borderline pairs are computed too and the result equals the full computation.

Precision: the proximity is never formed as the difference of the two L1 norms, which for a small contribution cancels
almost entirely and leaves only the rounding of the norms of ``y`` (float32 on long inputs: percent-level errors on
the small weights). With ``s = sign(y)`` (+1 at 0), ``|y_k| - |y_k - z_k| = s_k z_k - 2 relu(s_k (z_k - y_k))``
exactly, so ``prox(z, y) = max(0, s.z - 2 s.clamp(z - y))`` where the clamp keeps only the coordinates in which z
overshoots y (``[0, inf)`` where y >= 0, ``(-inf, 0]`` elsewhere); both terms are dot products, the first a matrix
product, and their error is relative to |z|_1 rather than |y|_1. The cheap reductions (sink weights and weighted
sinks, attention mass per source, denominators, the sum over layers, the hop ratios) accumulate in float64. A float64
model makes the whole engine float64 (the accuracy reference; see capture.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np
import torch

from ctxbench.attribution.base import AttributionResult, Attributor, InputContext, empty_matrix
from ctxbench.attribution.capture import Capture, capture
from ctxbench.attribution.memory import (Need, attention_rows, eager_attention, forward_transient, ifr_capture,
                                         result_matrix)
from ctxbench.core.part import neutral

_BOUND_MARGIN = 1e-3  # relative slack of the overshoot bound: far above f's rounding (~head_dim x eps)


@dataclass
class IFRConfig:
    tau: float = 0.0  # proximities below tau are zeroed (residual proximity excluded, as in FlashTrace's code)
    sink_chunk: int = 64  # sink rows whose attention is formed at once
    chunk_elems: int = 1 << 22  # budget (elements) of one heads x sinks x sources x d block (per-token IFR)
    f_cache_bytes: int = 1 << 30  # keep one layer's head outputs when they fit, otherwise rebuild per chunk


class SinkSigns:
    """``s = sign(y)`` (+1 where y >= 0, -1 elsewhere) over the last axis of the sink(s) y, and the bounds with which
    ``s * clamp(w, lo, hi) = relu(s * w)``: ``[0, inf)`` where s = +1, ``(-inf, 0]`` where s = -1."""

    def __init__(self, y: torch.Tensor):
        neg = y < 0
        self.s = torch.ones_like(y).masked_fill_(neg, -1.0)
        self.lo = torch.zeros_like(y).masked_fill_(neg, float("-inf"))
        self.hi = torch.full_like(y, float("inf")).masked_fill_(neg, 0.0)


def prox_l1(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``max(0, |y|_1 - |y - z|_1)`` over the last axis, broadcasting z against y, computed as
    ``s.z - 2 s.clamp(z - y, lo, hi)`` (see the module notes): no cancellation between the two norms, and a zero
    contribution has proximity exactly 0."""
    sg = SinkSigns(y)
    return ((z * sg.s).sum(-1) - 2.0 * ((z - y).clamp_(sg.lo, sg.hi) * sg.s).sum(-1)).clamp_min(0.0)


class LayerView:
    """Everything IFR needs from one layer, built lazily from the capture (attention rows, head outputs). Keys and
    values come from the capture's per-layer cache (projected once for all hops); heads are batched matrix products
    on per-head contiguous tensors (several times faster than the equivalent einsum on CPU)."""

    def __init__(self, cap: Capture, li: int, cfg: IFRConfig, n_src: Optional[int] = None):
        self.cap, self.li, self.cfg = cap, li, cfg
        self.ad = cap.adapter
        self.lc = cap.layers[li]
        self.n_src = cap.T if n_src is None else int(n_src)  # sources 0..n_src-1 (causality: max sink + 1)
        self._values: Optional[torch.Tensor] = None
        self._lse_qk: Optional[tuple] = None
        self._f: Optional[torch.Tensor] = None
        self._O = self.ad.out_blocks(li)  # (H, dh, d)
        H, d = self.ad.n_heads, self.ad.d_model
        self._cache_f = H * self.n_src * d * self.lc.x_prev.element_size() <= cfg.f_cache_bytes

    # rows are absolute positions (LongTensor), all >= cap.row_start; ``bounds`` = (min, max) of rows when the caller
    # knows them on the host (no device-to-host read per chunk on a GPU)
    def attn_rows(self, rows: torch.Tensor, bounds: Optional[tuple] = None, scaled: bool = True) -> torch.Tensor:
        """Attention probabilities (H, R, n_src) of the given sink rows; ``scaled``: times the rows' contribution
        scale where a norm follows the attention block (``row_scale``, Gemma 3), so that ``alpha f`` are the
        contributions."""
        if self.lc.attn is not None:
            a = self.lc.attn[:, rows - self.cap.row_start, :self.n_src]
        elif self.lc.lse is not None:
            a = self._scores(rows, bounds=bounds).exp_()
        else:
            a = torch.softmax(self._scores(rows, bounds=bounds), dim=-1)
        scale = self.row_scale(rows) if scaled else None
        return a if scale is None else a * scale[None, :, None]

    def row_scale(self, rows: torch.Tensor) -> Optional[torch.Tensor]:
        return None if self.lc.row_scale is None else self.lc.row_scale[rows - self.cap.row_start]

    def weighted_attention(self, rows: torch.Tensor, w: torch.Tensor, buf: Optional[torch.Tensor] = None,
                           bounds: Optional[tuple] = None) -> torch.Tensor:
        """``sum_r w_r alpha_r`` over the given sink rows with weights ``w`` (R,): (H, max(rows) + 1), the sources
        the rows can see (later ones have alpha = 0, so they are not formed: 1/8 of the products when the rows are
        the last quarter). Recomputed rows are formed in ``buf`` (flat, at least H x R x n_src elements) and
        normalised in place: no allocation per chunk, which at long inputs cost more than the arithmetic (fresh
        pages on every call)."""
        bounds = bounds or _bounds(rows)
        n = bounds[1] + 1
        H = self.ad.n_heads
        scale = self.row_scale(rows)
        if scale is not None:  # a norm after the attention block scales each row's contributions (Gemma 3)
            w = w * scale
        if self.lc.attn is not None:
            return torch.bmm(w.expand(H, 1, -1), self.attn_rows(rows, scaled=False)[..., :n])[:, 0]
        if self.lc.lse is not None:  # already log-probabilities
            return torch.bmm(w.expand(H, 1, -1), self._scores(rows, buf, n, bounds).exp_())[:, 0]
        # a sliding-window layer: the rows see only sources lo.. (earlier ones have alpha = 0 and are not formed)
        sw = self.ad.sliding_window(self.li)
        lo = max(0, bounds[0] - sw + 1) if sw else 0
        e = self._scores(rows, buf, n, bounds, lo)
        e.sub_(e.amax(-1, keepdim=True)).exp_()  # softmax numerators; the row sums are divided into the weights
        out = torch.bmm((w[None] / e.sum(-1))[:, None, :], e)[:, 0]
        return torch.nn.functional.pad(out, (lo, 0)) if lo else out

    def _scores(self, rows: torch.Tensor, buf: Optional[torch.Tensor] = None, n: Optional[int] = None,
                bounds: Optional[tuple] = None, lo: int = 0) -> torch.Tensor:
        """Masked attention logits (H, R, n) of the given sink rows over sources 0..n-1 (default n_src), in
        ``buf`` when given; log-probabilities when the capture kept the kernel's log-sum-exp (``lse``), subtracted
        inside the product itself: the queries carry ``-lse`` as one more coordinate against a column of ones in the
        keys."""
        ad, R, N = self.ad, rows.numel(), self.n_src if n is None else n
        if self.lc.lse is None:
            q = self.cap.queries(self.li, rows) * ad.scaling(self.li)  # (H, R, dh)
            keys = self.cap.kv(self.li)[0][:, lo:N]  # (Hkv, N - lo, dh)
        else:
            q, keys = self._with_lse()
            q, keys = q[:, rows - self.cap.row_start], keys[:, lo:N]
        # query head h = kv * group + i reads KV head kv: one (group*R, dh) x (dh, N - lo) product per KV head
        q = q.reshape(ad.n_kv_heads, ad.group * R, q.shape[-1])
        M = N - lo  # scores of sources lo..N-1
        out = None if buf is None else buf[:ad.n_heads * R * M].view(ad.n_kv_heads, ad.group * R, M)
        scores = torch.bmm(q, keys.transpose(1, 2), out=out).view(ad.n_heads, R, M)
        sw = ad.sliding_window(self.li)
        # causal masking only touches sources after the first row (a window: every source may be out of it)
        c0 = lo if sw else max(lo, (bounds or _bounds(rows))[0] + 1)
        j = torch.arange(c0, N, device=rows.device)
        blocked = j[None, :] > rows[:, None]
        if sw:
            blocked |= j[None, :] <= rows[:, None] - sw
        scores[:, :, c0 - lo:].masked_fill_(blocked[None], float("-inf"))
        return scores

    def _with_lse(self) -> tuple:
        """(scaled queries of every captured row with ``-lse`` appended (H, R, dh + 1), keys with a column of ones
        (Hkv, n_src, dh + 1)), made once per layer view for all its sink chunks."""
        if self._lse_qk is None:
            lc, ad = self.lc, self.ad
            q = torch.cat([lc.q * ad.scaling(self.li), lc.lse[..., None].neg()], dim=-1)
            k = self.cap.kv(self.li)[0][:, :self.n_src]
            self._lse_qk = (q, torch.cat([k, k.new_ones(*k.shape[:2], 1)], dim=-1))
        return self._lse_qk

    def head_outputs(self, j0: int, j1: int) -> torch.Tensor:
        """f for sources j0..j1-1: (H, J, d)."""
        if self._f is not None:
            return self._f[:, j0:j1]
        if self._cache_f:
            self._f = self._compute_f(0, self.n_src)
            return self._f[:, j0:j1]
        return self._compute_f(j0, j1)

    def _compute_f(self, j0: int, j1: int) -> torch.Tensor:
        return torch.bmm(self.values()[:, j0:j1], self._O)

    def values(self) -> torch.Tensor:
        """(H, N, dh): the cached values expanded to query heads (small next to f)."""
        if self._values is None:
            v = self.cap.kv(self.li)[1][:, :self.n_src]
            self._values = v.repeat_interleave(self.ad.group, dim=0) if self.ad.group > 1 else v
        return self._values

    def overshoot(self, a: torch.Tensor, y: torch.Tensor, sg: "SinkSigns") -> torch.Tensor:
        """``s . clamp(a_j^h f_j^h - y)`` (H, n_src) for per-pair weights ``a`` (H, n_src) against one sink ``y`` (d,),
        computed only where the bound in the module notes allows a non-zero value (exact zeros elsewhere)."""
        v, group = self.cap.kv(self.li)[1], self.ad.group  # (Hkv, T, dh): query head h reads KV head h // group
        H, N = a.shape
        out = torch.zeros(H, N, dtype=a.dtype, device=a.device)
        o_rows, o_norms = self.ad.out_rows(self.li)  # (H, d, dh) = W_O^h transposed, (H, d) its column norms
        # coordinate k of pair (j, h) is reachable iff bound_jh > |y_k| / |W_O^h[:, k]| (inf where the column is 0)
        bound = a * self.cap.value_norms(self.li)[:, :N].repeat_interleave(self.ad.group, dim=0)
        bound *= 1.0 + _BOUND_MARGIN
        reach = y.abs()[None] / o_norms  # (H, d)
        live = bound > reach.amin(-1, keepdim=True)  # (H, N): pairs that can overshoot somewhere
        for h, n in enumerate(live.sum(-1).tolist()):
            if n == 0:
                continue
            js = torch.nonzero(live[h]).flatten()
            ks = torch.nonzero(reach[h] < bound[h, js].max()).flatten()
            o_k, lo, hi, s_k, y_k = o_rows[h].index_select(0, ks), sg.lo[ks], sg.hi[ks], sg.s[ks], y[ks]
            step = self.source_chunk(ks.numel())
            for i0 in range(0, n, step):
                jj = js[i0:i0 + step]
                c = (v[h // group].index_select(0, jj) @ o_k.T).mul_(a[h, jj, None])  # (J, K) contributions there
                out[h, jj] = c.sub_(y_k).clamp_(lo, hi) @ s_k
        return out

    def head_dots(self, j0: int, j1: int, s: torch.Tensor) -> torch.Tensor:
        """``f_j^h . s`` for sources j0..j1-1 without reading f: ``v_j^h . (W_O^h s)``. s (d,) -> (H, J);
        s (R, d) -> (R, H, J)."""
        if s.dim() == 1:  # per KV head, its query heads side by side: the values are never expanded
            ad = self.ad
            os = (self._O @ s).view(ad.n_kv_heads, ad.group, ad.head_dim).transpose(1, 2)  # (Hkv, dh, group)
            vk = self.cap.kv(self.li)[1][:, j0:j1]  # (Hkv, J, dh)
            return torch.bmm(vk, os).transpose(1, 2).reshape(ad.n_heads, j1 - j0)
        return torch.bmm(self.values()[:, j0:j1], self._O @ s.T).permute(2, 0, 1)

    def x_mid(self, rows):
        return self.lc.x_mid[rows - self.cap.row_start]

    def x_prev(self, rows):
        return self.lc.x_prev[rows - self.cap.row_start]

    def source_chunk(self, per_source: int) -> int:
        return max(1, self.cfg.chunk_elems // max(1, per_source))


def _bounds(rows: torch.Tensor) -> tuple:
    return int(rows.min()), int(rows.max())


def _chunks(rows: torch.Tensor, size: int) -> list:
    """``(slice, (min, max))`` per chunk of ``size`` rows, the bounds read from one host copy of the rows."""
    host = rows.cpu()
    return [(slice(r0, r0 + size), _bounds(host[r0:r0 + size])) for r0 in range(0, host.numel(), size)]


def _threshold(p: torch.Tensor, tau: float) -> torch.Tensor:
    return p.masked_fill_(p < tau, 0.0) if tau > 0 else p


@torch.no_grad()
def span_ifr(cap: Capture, rows, weights=None, cfg: Optional[IFRConfig] = None) -> torch.Tensor:
    """Span IFR (§4.2): token vector (T,) summed over layers for sink rows ``rows`` (absolute positions).

    ``weights`` (same length) are normalised to sum 1; uniform when None. Rows of zero weight are skipped.
    """
    cfg = cfg or IFRConfig()
    dev, dt, f64 = cap.device, cap.dtype, torch.float64
    rows = torch.as_tensor(rows, dtype=torch.long, device=dev).reshape(-1)
    w = torch.ones(rows.numel(), dtype=f64, device=dev) if weights is None else \
        torch.as_tensor(weights, device=dev).reshape(-1).to(f64, copy=True)
    if w.numel() != rows.numel():
        raise ValueError(f"{w.numel()} weights for {rows.numel()} sink rows")
    total = torch.zeros(cap.T, dtype=f64, device=dev)  # sum over layers
    if float(w.sum()) <= 0:
        return total.to(dt)
    keep = w > 0
    rows, w = rows[keep], w[keep] / w[keep].sum()
    w_dt = w.to(dt)
    chunks = _chunks(rows, cfg.sink_chunk)
    n_src = max(hi for _, (_, hi) in chunks) + 1
    H = cap.adapter.n_heads
    buf = None if cap.stored_attention else \
        torch.empty(H * min(cfg.sink_chunk, rows.numel()) * n_src, dtype=dt, device=dev)  # one sink chunk's rows
    for li in range(len(cap.layers)):
        lv = LayerView(cap, li, cfg, n_src)
        abar = torch.zeros(H, n_src, dtype=f64, device=dev)
        for sl, bounds in chunks:
            abar[:, :bounds[1] + 1] += lv.weighted_attention(rows[sl], w_dt[sl], buf, bounds)
        abar = abar.to(dt)
        x_s = w @ lv.x_mid(rows).to(f64)
        r_s = w @ lv.x_prev(rows).to(f64)
        resid = prox_l1(r_s, x_s)
        x_s = x_s.to(dt)
        sg = SinkSigns(x_s)
        p = abar * lv.head_dots(0, n_src, sg.s)  # s . c_j^h with c_j^h = abar_j^h f_j^h
        p.sub_(lv.overshoot(abar, x_s, sg), alpha=2.0).clamp_min_(0.0)
        numer = _threshold(p, cfg.tau).sum(0)
        denom = numer.sum(dtype=f64) + resid
        total[:n_src] += torch.where(denom > 0, numer.to(f64) / denom, 0.0)  # a layer with no proximity adds 0
    return total.to(dt)


@torch.no_grad()
def per_token_ifr(cap: Capture, rows, cfg: Optional[IFRConfig] = None) -> torch.Tensor:
    """Per-token IFR (§4.1) for each sink in ``rows``: (R, T) summed over layers, chunked over sinks and sources."""
    cfg = cfg or IFRConfig()
    dev, dt, f64 = cap.device, cap.dtype, torch.float64
    rows = torch.as_tensor(rows, dtype=torch.long, device=dev).reshape(-1)
    out = torch.zeros(rows.numel(), cap.T, dtype=f64, device=dev)  # sum over layers
    if rows.numel() == 0:
        return out.to(dt)
    chunks = _chunks(rows, cfg.sink_chunk)
    n_src = max(hi for _, (_, hi) in chunks) + 1
    H, d = cap.adapter.n_heads, cap.adapter.d_model
    for li in range(len(cap.layers)):
        lv = LayerView(cap, li, cfg, n_src)
        for sl, bounds in chunks:
            rr, r0 = rows[sl], sl.start
            R, top = rr.numel(), bounds[1] + 1  # sources after the last sink of the chunk carry alpha = 0
            alpha = lv.attn_rows(rr, bounds).permute(1, 0, 2).contiguous()  # (R, H, N): sink-major, as the block below
            xm, xp = lv.x_mid(rr), lv.x_prev(rr)
            sg = SinkSigns(xm)  # (R, d)
            s_col, lo, hi, neg_xm = sg.s[:, :, None], sg.lo[:, None, None], sg.hi[:, None, None], -xm[:, None, None]
            numer = torch.zeros(R, top, dtype=dt, device=dev)
            step = lv.source_chunk(H * R * d)
            for j0 in range(0, top, step):
                j1 = min(top, j0 + step)
                f, a = lv.head_outputs(j0, j1), alpha[:, :, j0:j1]  # (H, J, d), (R, H, J)
                J = j1 - j0
                p = a * lv.head_dots(j0, j1, sg.s)  # s_i . c_ij^h
                # (R, H, J, d) block of c - x_mid, clamped to where c overshoots x_mid; kept under chunk_elems elements
                over = torch.addcmul(neg_xm, a[..., None], f[None], out=xm.new_empty(R, H, J, d)).clamp_(lo, hi)
                p.sub_(torch.bmm(over.view(R, H * J, d), s_col).view(R, H, J), alpha=2.0).clamp_min_(0.0)
                del over
                p.masked_fill_((torch.arange(j0, j1, device=dev)[None, :] > rr[:, None])[:, None], 0.0)  # causal
                numer[:, j0:j1] = _threshold(p, cfg.tau).sum(1)
            denom = numer.sum(1, dtype=f64) + prox_l1(xp.to(f64), xm.to(f64))
            out[r0:r0 + R, :top] += torch.where((denom > 0)[:, None], numer.to(f64) / denom[:, None], 0.0)
    return out.to(dt)


@torch.no_grad()
def reconstruct_x_mid(cap: Capture, li: int, rows) -> torch.Tensor:
    """x_prev + sum_{j,h} alpha_ij^h f_j^h + b_O for the given rows (alpha and b_O times the row's scale where a
    norm follows the attention block): equals the hooked x_mid when the decomposition is exact (used by tests and as
    a sanity check for a new model family)."""
    dev = cap.device
    rows = torch.as_tensor(rows, dtype=torch.long, device=dev).reshape(-1)
    lv = LayerView(cap, li, IFRConfig(), int(rows.max()) + 1)
    alpha = lv.attn_rows(rows)  # (H, R, N)
    f = lv.head_outputs(0, lv.n_src)  # (H, N, d)
    out = lv.x_prev(rows) + torch.einsum("hrn,hnd->rd", alpha, f)
    b = cap.adapter.out_bias(li)
    scale = lv.row_scale(rows)
    if b is not None:
        out = out + (b if scale is None else scale[:, None] * b)
    return out


# --- attributors ----------------------------------------------------------------------------------------------------


@dataclass
class IFRAttributorBase(Attributor):
    """Parameters and the capture step every IFR method shares.

    ``recompute_attention``: rebuild attention rows per layer from the captured input (memory O(heads x T^2) for one
    layer) instead of storing the eager probabilities of the generated rows. ``forward_attn_impl``: kernel of the
    capture pass when recomputing ("sdpa" is several times faster than eager on CPU and changes IFR only by kernel
    rounding, ~1e-5; None keeps the loaded kernel, and recomputed and stored attention then agree to 1e-6). The
    arithmetic is float32, or float64 for a float64 model (``model.dtype=float64``: the accuracy reference, module
    notes).
    """

    tau: float = 0.0  # proximities below tau count 0
    recompute_attention: bool = True
    forward_attn_impl: Optional[str] = "sdpa"
    sink_chunk: int = neutral(64, ge=1)  # sink rows whose attention is formed at once
    chunk_elems: int = neutral(1 << 22, ge=1)  # elements of one (sources x heads x d) block
    f_cache_bytes: int = neutral(1 << 30, ge=1)  # keep one layer's head outputs when they fit

    @property
    def cfg(self) -> IFRConfig:
        return IFRConfig(tau=float(self.tau), sink_chunk=int(self.sink_chunk), chunk_elems=int(self.chunk_elems),
                         f_cache_bytes=int(self.f_cache_bytes))

    def memory_need(self, shape, T, G):
        # the capture, the pass's working tensors, one layer's head outputs (kept up to f_cache_bytes), the result
        need = (ifr_capture(shape, T, G) + forward_transient(shape, T) + result_matrix(T, G)
                + min(int(self.f_cache_bytes), T * shape.heads * shape.d * shape.elem))
        if not self.recompute_attention:  # stored rows need the eager kernel's probabilities
            need += attention_rows(shape, T, G) + eager_attention(shape, T, None)
        else:
            need += eager_attention(shape, T, self.forward_attn_impl)
        return Need(need, f"IFR's capture of {shape.layers} layers")

    def _capture(self, model, ctx: InputContext, timings: dict):
        t0 = time.perf_counter()
        cap = capture(model, ctx.input_ids, ctx.gen_start, store_attention=not self.recompute_attention,
                      forward_attn_impl=self.forward_attn_impl)
        timings["capture"] = time.perf_counter() - t0
        return cap


@dataclass
class SpanIFRAttributor(IFRAttributorBase):
    """One span-IFR vector over the sink span (whole generation if None), written into every row of the span."""

    name: ClassVar[str] = "ifr_span"

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        sink = sink or (0, ctx.G - 1)
        with torch.no_grad():
            cap = self._capture(model, ctx, timings)
            t0 = time.perf_counter()
            v = ctx.to_columns(span_ifr(cap, ctx.gen_rows(sink), None, self.cfg)).cpu().numpy()
            timings["attribution"] = time.perf_counter() - t0
        A = empty_matrix(ctx.G, ctx.P)
        A[sink[0]:sink[1] + 1] = v
        return AttributionResult(matrix=A, method=self.name, P=ctx.P, G=ctx.G,
                                 rows_written=np.arange(sink[0], sink[1] + 1))


@dataclass
class AllPositionsIFRAttributor(IFRAttributorBase):
    """Per-token IFR: row t is the IFR of the sink at generated token t (every generated token the caller reads)."""

    name: ClassVar[str] = "ifr_all_positions"

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        rows = ctx.row_indices()
        with torch.no_grad():
            cap = self._capture(model, ctx, timings)
            t0 = time.perf_counter()
            M = per_token_ifr(cap, ctx.gen_start + torch.as_tensor(rows, device=ctx.input_ids.device), self.cfg)
            A = empty_matrix(ctx.G, ctx.P)
            A[rows] = ctx.to_columns(M).cpu().numpy()
            timings["attribution"] = time.perf_counter() - t0
        return AttributionResult(matrix=A, method=self.name, P=ctx.P, G=ctx.G, rows_written=rows)
