"""IFR core (spec §4.1-4.2): per-head, per-source contributions of the attention block and their proximities.

For layer l, sink i, source j, head h: ``f_j^h = v_j^h W_O^h``, ``c_ij^h = alpha_ij^h f_j^h`` and
``x_mid_i = x_prev_i + sum_{j,h} c_ij^h + b_O``. ``prox(z, y) = max(0, |y|_1 - |y - z|_1)``.

Memory: attention probabilities are only ever formed for a chunk of sink rows of one layer (H x rows x T); head
outputs ``f`` are kept for one layer (H x T x d) when that fits ``f_cache_bytes``, else rebuilt per source chunk; the
per-token path never holds more than ``chunk_elems`` elements of the (heads x sinks x sources x d) difference tensor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np
import torch

from ctxbench.attribution.base import AttributionResult, Attributor, InputContext, empty_matrix
from ctxbench.attribution.capture import Capture, capture


@dataclass
class IFRConfig:
    tau: float = 0.0  # proximities below tau are zeroed (residual proximity excluded, as in the reference)
    sink_chunk: int = 64  # sink rows whose attention is formed at once
    chunk_elems: int = 1 << 22  # budget (elements) of one heads x sinks x sources x d block (per-token IFR)
    f_cache_bytes: int = 1 << 30  # keep one layer's head outputs when they fit, otherwise rebuild per chunk


def prox_l1(z: torch.Tensor, y: torch.Tensor, y_l1: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Proximity over the last axis, broadcasting z against y."""
    if y_l1 is None:
        y_l1 = l1(y)
    return (y_l1 - l1(y - z)).clamp_min(0.0)


def l1(x: torch.Tensor) -> torch.Tensor:
    """One reduction everywhere: |y|_1 and |y - 0|_1 must round identically so that a zero contribution has
    proximity exactly 0."""
    return torch.linalg.vector_norm(x, ord=1, dim=-1)


class LayerView:
    """Everything IFR needs from one layer, built lazily from the capture (keys, head outputs, attention rows)."""

    def __init__(self, cap: Capture, li: int, cfg: IFRConfig, n_src: Optional[int] = None):
        self.cap, self.li, self.cfg = cap, li, cfg
        self.ad = cap.adapter
        self.lc = cap.layers[li]
        self.n_src = cap.T if n_src is None else int(n_src)  # sources 0..n_src-1 (causality: max sink + 1)
        self._keys: Optional[torch.Tensor] = None
        self._values: Optional[torch.Tensor] = None
        self._f: Optional[torch.Tensor] = None
        self._O = self.ad.out_blocks(li)  # (H, dh, d)
        H, d = self.ad.n_heads, self.ad.d_model
        self._cache_f = H * self.n_src * d * self.lc.h.element_size() <= cfg.f_cache_bytes

    # rows are absolute positions (LongTensor), all >= cap.row_start
    def attn_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Attention probabilities (H, R, n_src) of the given sink rows."""
        if self.lc.attn is not None:
            return self.lc.attn[:, rows - self.cap.row_start, :self.n_src]
        if self._keys is None:
            self._keys = self.ad.keys(self.li, self.lc.h[:self.n_src], self.cap.pos_emb)  # (N, H, dh)
        q = self.ad.queries(self.li, self.lc.h[rows], rows, self.cap.pos_emb)  # (R, H, dh)
        scores = torch.einsum("rhd,nhd->hrn", q, self._keys) * self.ad.scaling(self.li)
        j = torch.arange(self.n_src, device=rows.device)
        blocked = j[None, :] > rows[:, None]
        sw = self.ad.sliding_window(self.li)
        if sw:
            blocked |= j[None, :] <= rows[:, None] - sw
        scores.masked_fill_(blocked[None], float("-inf"))
        return torch.softmax(scores, dim=-1)

    def head_outputs(self, j0: int, j1: int) -> torch.Tensor:
        """f for sources j0..j1-1: (H, J, d)."""
        if self._f is not None:
            return self._f[:, j0:j1]
        if self._cache_f:
            self._f = self._compute_f(0, self.n_src)
            return self._f[:, j0:j1]
        return self._compute_f(j0, j1)

    def _compute_f(self, j0: int, j1: int) -> torch.Tensor:
        if self._values is None:
            self._values = self.ad.values(self.li, self.lc.h[:self.n_src])  # (N, H, dh): small next to f
        return torch.einsum("jhk,hkd->hjd", self._values[j0:j1], self._O)

    def x_mid(self, rows):
        return self.lc.x_mid[rows - self.cap.row_start]

    def x_prev(self, rows):
        return self.lc.x_prev[rows - self.cap.row_start]

    def source_chunk(self, per_source: int) -> int:
        return max(1, self.cfg.chunk_elems // max(1, per_source))


def _threshold(p: torch.Tensor, tau: float) -> torch.Tensor:
    return p.masked_fill_(p < tau, 0.0) if tau > 0 else p


@torch.no_grad()
def span_ifr(cap: Capture, rows, weights=None, cfg: Optional[IFRConfig] = None) -> torch.Tensor:
    """Span IFR (§4.2): token vector (T,) summed over layers for sink rows ``rows`` (absolute positions).

    ``weights`` (same length) are normalised to sum 1; uniform when None. Rows of zero weight are skipped.
    """
    cfg = cfg or IFRConfig()
    dev, dt = cap.layers[0].h.device, cap.dtype
    rows = torch.as_tensor(rows, dtype=torch.long, device=dev).reshape(-1)
    w = torch.ones(rows.numel(), dtype=dt, device=dev) if weights is None else \
        torch.as_tensor(weights, dtype=dt, device=dev).reshape(-1).clone()
    if w.numel() != rows.numel():
        raise ValueError(f"{w.numel()} weights for {rows.numel()} sink rows")
    total = torch.zeros(cap.T, dtype=dt, device=dev)
    if float(w.sum()) <= 0:
        return total
    keep = w > 0
    rows, w = rows[keep], w[keep] / w[keep].sum()
    n_src = int(rows.max()) + 1
    H, d = cap.adapter.n_heads, cap.adapter.d_model
    for li in range(len(cap.layers)):
        lv = LayerView(cap, li, cfg, n_src)
        abar = torch.zeros(H, n_src, dtype=dt, device=dev)
        for r0 in range(0, rows.numel(), cfg.sink_chunk):
            sl = slice(r0, r0 + cfg.sink_chunk)
            abar += torch.einsum("r,hrn->hn", w[sl], lv.attn_rows(rows[sl]))
        x_s = w @ lv.x_mid(rows)
        r_s = w @ lv.x_prev(rows)
        x_s_l1 = l1(x_s)
        numer = torch.empty(n_src, dtype=dt, device=dev)
        step = lv.source_chunk(H * d)
        for j0 in range(0, n_src, step):
            j1 = min(n_src, j0 + step)
            c = lv.head_outputs(j0, j1) * abar[:, j0:j1, None]
            numer[j0:j1] = _threshold(prox_l1(c, x_s, x_s_l1), cfg.tau).sum(0)
        denom = numer.sum() + prox_l1(r_s, x_s, x_s_l1)
        if float(denom) > 0:
            total[:n_src] += numer / denom
    return total


@torch.no_grad()
def per_token_ifr(cap: Capture, rows, cfg: Optional[IFRConfig] = None) -> torch.Tensor:
    """Per-token IFR (§4.1) for each sink in ``rows``: (R, T) summed over layers, chunked over sinks and sources."""
    cfg = cfg or IFRConfig()
    dev, dt = cap.layers[0].h.device, cap.dtype
    rows = torch.as_tensor(rows, dtype=torch.long, device=dev).reshape(-1)
    out = torch.zeros(rows.numel(), cap.T, dtype=dt, device=dev)
    if rows.numel() == 0:
        return out
    n_src = int(rows.max()) + 1
    H, d = cap.adapter.n_heads, cap.adapter.d_model
    for li in range(len(cap.layers)):
        lv = LayerView(cap, li, cfg, n_src)
        for r0 in range(0, rows.numel(), cfg.sink_chunk):
            rr = rows[r0:r0 + cfg.sink_chunk]
            R, top = rr.numel(), int(rr.max()) + 1  # sources after the last sink of the chunk carry alpha = 0
            alpha = lv.attn_rows(rr)
            xm, xp = lv.x_mid(rr), lv.x_prev(rr)
            xm_l1 = l1(xm)
            numer = torch.zeros(R, top, dtype=dt, device=dev)
            step = lv.source_chunk(H * R * d)
            for j0 in range(0, top, step):
                j1 = min(top, j0 + step)
                # (H, R, J, d) block: alpha * f - x_mid, then the L1 norm; kept under chunk_elems elements
                blk = alpha[:, :, j0:j1, None] * lv.head_outputs(j0, j1)[:, None]
                blk.sub_(xm[None, :, None, :])
                dist = l1(blk)
                del blk
                p = (xm_l1[None, :, None] - dist).clamp_min_(0.0)
                p.masked_fill_((torch.arange(j0, j1, device=dev)[None, :] > rr[:, None])[None], 0.0)  # causal
                numer[:, j0:j1] = _threshold(p, cfg.tau).sum(0)
            denom = numer.sum(1) + prox_l1(xp, xm, xm_l1)
            ok = denom > 0
            out[r0:r0 + R, :top][ok] += numer[ok] / denom[ok, None]
    return out


@torch.no_grad()
def reconstruct_x_mid(cap: Capture, li: int, rows) -> torch.Tensor:
    """x_prev + sum_{j,h} alpha_ij^h f_j^h + b_O for the given rows: equals the hooked x_mid when the decomposition
    is exact (used by tests and as a sanity check for a new model family)."""
    dev = cap.layers[0].h.device
    rows = torch.as_tensor(rows, dtype=torch.long, device=dev).reshape(-1)
    lv = LayerView(cap, li, IFRConfig(), int(rows.max()) + 1)
    alpha = lv.attn_rows(rows)  # (H, R, N)
    f = lv.head_outputs(0, lv.n_src)  # (H, N, d)
    out = lv.x_prev(rows) + torch.einsum("hrn,hnd->rd", alpha, f)
    b = cap.adapter.out_bias(li)
    return out if b is None else out + b


# --- attributors ----------------------------------------------------------------------------------------------------


@dataclass
class IFRAttributorBase(Attributor):
    """Parameters and the capture step every IFR method shares.

    ``recompute_attention``: rebuild attention rows per layer from the captured input (memory O(heads x T^2) for one
    layer) instead of storing the eager probabilities of the generated rows. ``forward_attn_impl``: kernel of the capture
    pass when recomputing ("sdpa" is several times faster than eager on CPU and changes IFR only by kernel rounding,
    ~1e-5; None keeps the loaded kernel, and recomputed and stored attention then agree to 1e-6).
    """

    tau: float = 0.0  # proximities below tau count 0
    recompute_attention: bool = True
    forward_attn_impl: Optional[str] = "sdpa"
    sink_chunk: int = 64  # sink rows whose attention is formed at once
    chunk_elems: int = 1 << 22  # elements of one (sources x heads x d) block
    f_cache_bytes: int = 1 << 30  # keep one layer's head outputs when they fit

    def __post_init__(self):
        for name in ("sink_chunk", "chunk_elems", "f_cache_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{self.method}: {name} must be >= 1, got {getattr(self, name)}")

    @property
    def cfg(self) -> IFRConfig:
        return IFRConfig(tau=float(self.tau), sink_chunk=int(self.sink_chunk), chunk_elems=int(self.chunk_elems),
                         f_cache_bytes=int(self.f_cache_bytes))

    def _capture(self, model, ctx: InputContext, timings: dict):
        t0 = time.perf_counter()
        cap = capture(model, ctx.input_ids, ctx.gen_start, store_attention=not self.recompute_attention,
                      forward_attn_impl=self.forward_attn_impl)
        timings["capture"] = time.perf_counter() - t0
        return cap


@dataclass
class SpanIFRAttributor(IFRAttributorBase):
    """One span-IFR vector over the sink span (whole generation if None), written into every row of the span."""

    method: ClassVar[str] = "ifr_span"

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        sink = sink or (0, ctx.G - 1)
        with torch.no_grad():
            cap = self._capture(model, ctx, timings)
            t0 = time.perf_counter()
            v = ctx.to_columns(span_ifr(cap, ctx.gen_rows(sink), None, self.cfg)).cpu().numpy()
            timings["attribution"] = time.perf_counter() - t0
        A = empty_matrix(ctx.G, ctx.P)
        A[sink[0]:sink[1] + 1] = v
        return AttributionResult(matrix=A, method=self.method, P=ctx.P, G=ctx.G,
                                 rows_written=np.arange(sink[0], sink[1] + 1))


@dataclass
class AllPositionsIFRAttributor(IFRAttributorBase):
    """Per-token IFR: row t is the IFR of the sink at generated token t (every generated token)."""

    method: ClassVar[str] = "ifr_all_positions"

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        with torch.no_grad():
            cap = self._capture(model, ctx, timings)
            t0 = time.perf_counter()
            M = per_token_ifr(cap, ctx.gen_rows((0, ctx.G - 1)), self.cfg)
            A = ctx.to_columns(M).cpu().numpy().astype(np.float32)
            timings["attribution"] = time.perf_counter() - t0
        return AttributionResult(matrix=A, method=self.method, P=ctx.P, G=ctx.G, rows_written=np.arange(ctx.G))
