"""One forward pass with hooks, and per-family access to what IFR needs from each attention layer.

What is kept per layer (batch of one), in the capture's dtype: float32, or float64 when the model itself is float64
(the accuracy reference: ``model.dtype=float64``):
- ``h``: the attention block's input, i.e. the normalised residual ``norm(x_prev)`` for every position. Values, keys and
  queries are plain projections of it, so the norm never has to be re-derived ("linearised") from ``x_prev``;
  ``v_j = norm(x_prev_j) W_V (+ b_V)`` is exactly IFR's linearised ``(x_prev_j * s_j) W_V`` (for LayerNorm the
  centring and its bias are part of ``norm``).
- ``x_prev`` / ``x_mid`` only for the rows that can be sinks (``row_start:``); IFR never needs them elsewhere.
- optionally the eager attention probabilities of those rows (the "stored" mode), never the whole T x T.
- with an sdpa pass on the CPU: the queries, keys and values the kernel got, and the log-sum-exp of each of those
  rows' logits (``causal_attention_with_lse``), so recomputed attention rows need no max and sum passes.

The forward pass is stopped right after the last layer's ``x_mid`` is seen: the last MLP, the final norm and the
LM head (about a tenth of a SmolLM2 forward) are never needed.

What a family's layers are and how its queries, keys, values and W_O are read: ``ctxbench.attribution.families``
(Llama-like decoders and GPT-2, one module each).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Optional

import torch

from ctxbench.attribution.families import FamilyAdapter, UnsupportedModelError, adapter_for
from ctxbench.models.attention import attention_kernel


class _StopForward(Exception):
    """Raised from the last hook: everything after the last attention block is irrelevant to IFR."""


@dataclass
class LayerCapture:
    h: Optional[torch.Tensor]  # (T, d) attention input; None when the kernel's q/k/v were recorded instead
    x_prev: torch.Tensor  # (R, d) rows row_start..T-1
    x_mid: torch.Tensor  # (R, d)
    attn: Optional[torch.Tensor] = None  # (H, R, T) stored eager probabilities of the same rows
    kv: Optional[tuple] = None  # (keys, values), each (n_kv_heads, T, head_dim): built on first use, read by every hop
    # (n_heads, R, head_dim) queries of rows row_start.., as the attention kernel got them
    q: Optional[torch.Tensor] = None
    v_norms: Optional[torch.Tensor] = None  # (n_kv_heads, T) L2 norms of the values
    # (n_heads, R) log-sum-exp of the scaled logits of rows row_start.., from the kernel
    lse: Optional[torch.Tensor] = None
    # (R,) factor of the contributions of rows row_start.. where a norm follows the attention block (Gemma 3)
    row_scale: Optional[torch.Tensor] = None
    pos_emb: Optional[tuple] = None  # (cos, sin), each (T, head_dim), for RoPE families (per layer: Gemma 3's differ)


@dataclass
class Capture:
    adapter: FamilyAdapter
    layers: list
    row_start: int
    T: int
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def dtype(self) -> torch.dtype:
        return self.layers[0].x_prev.dtype

    @property
    def device(self) -> torch.device:
        return self.layers[0].x_prev.device

    @property
    def stored_attention(self) -> bool:
        return self.layers[0].attn is not None

    def kv(self, li: int) -> tuple:
        """Keys (position encoding applied) and values of layer ``li`` for all T positions, one per KV head
        ((n_kv_heads, T, head_dim) each, contiguous per head): those the attention kernel received when the capture
        recorded them, else projected once from ``h`` and kept. Unexpanded they cost 2 x n_kv_heads x head_dim floats
        per position and layer, a fraction of ``h``; every hop and method reuses them."""
        lc = self.layers[li]
        if lc.kv is None:
            k = self.adapter.keys(li, lc.h, lc.pos_emb)
            v = self.adapter.values(li, lc.h)
            lc.kv = (k.transpose(0, 1).contiguous(), v.transpose(0, 1).contiguous())
        return lc.kv

    def queries(self, li: int, rows: torch.Tensor) -> torch.Tensor:
        """(n_heads, R, head_dim) queries of the given absolute rows (all >= row_start), position encoding applied,
        heads first like ``kv``: the ones the attention kernel received when the capture recorded them, else projected
        again from ``h``."""
        lc = self.layers[li]
        if lc.q is not None:
            return lc.q[:, rows - self.row_start]
        return self.adapter.queries(li, lc.h[rows], rows, lc.pos_emb).transpose(0, 1)

    def value_norms(self, li: int) -> torch.Tensor:
        """L2 norms of the values (n_kv_heads, T), kept with them."""
        lc = self.layers[li]
        if lc.v_norms is None:
            lc.v_norms = torch.linalg.vector_norm(self.kv(li)[1], dim=-1)
        return lc.v_norms


def _hidden_arg(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


def causal_attention_with_lse(module, query, key, value, attention_mask=None, dropout=0.0, scaling=None,
                              is_causal=None, **kwargs) -> Optional[tuple]:
    """``(output (B, T, H, dh), log-sum-exp (B, H, T))`` of a plain causal self-attention on the CPU, from the flash
    kernel that sdpa itself dispatches to there (same output, bit for bit), called directly because sdpa drops the
    log-sum-exp; with it the hops' attention rows come out normalised (no max and sum passes per row). None for any
    call that is not plain (mask, dropout, sliding window, soft-capping, position bias, cache, other devices): the
    caller then runs the registered kernel."""
    plain = (query.device.type == "cpu" and query.dtype in (torch.float32, torch.float64) and attention_mask is None
             and not dropout and scaling is not None and query.shape[2] == key.shape[2] > 1
             and (is_causal if is_causal is not None else getattr(module, "is_causal", True))
             and all(kwargs.get(k) is None for k in ("softcap", "sliding_window", "position_bias")))
    if not plain:
        return None
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, 0.0, True,
                                                                           scale=float(scaling))
    return out.transpose(1, 2).contiguous(), lse


@contextlib.contextmanager
def recording_attention(model, record):
    """Inside the block, every call of the model's attention kernel first passes (module, queries, keys, values,
    log-sum-exp or None) to ``record``: the exact post-RoPE (and post q/k-norm) tensors the kernel got, so IFR never
    projects them again, and the softmax normaliser of each row when the call is one ``causal_attention_with_lse``
    can compute. Works through transformers' attention registry, i.e. for every kernel but eager (which models call
    directly); with eager nothing is recorded and IFR projects from the captured inputs instead."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS as registry

    impl = getattr(model.config, "_attn_implementation", None)
    if impl is None or impl == "eager" or impl not in registry:
        yield
        return
    had_local = impl in registry._local_mapping
    kernel = registry[impl]

    def recorded(module, query, key, value, *args, **kwargs):
        fast = causal_attention_with_lse(module, query, key, value, *args, **kwargs) if impl == "sdpa" else None
        record(module, query, key, value, None if fast is None else fast[1])
        if fast is not None:
            return fast[0], None
        return kernel(module, query, key, value, *args, **kwargs)

    registry[impl] = recorded
    try:
        yield
    finally:
        if had_local:
            registry[impl] = kernel
        else:
            del registry[impl]


class _Recorder:
    """The hooks of one capture pass, and what they keep per layer for rows ``row_start..T-1`` (in ``dtype``): the
    attention input, or the q/k/v (and log-sum-exp) the kernel got; the layer input and ``x_mid``; the eager
    attention probabilities when stored; a sandwich norm's row scale; the RoPE tables, one copy per base."""

    def __init__(self, ad: FamilyAdapter, row_start: int):
        self.ad, self.row_start, self.dt, L = ad, row_start, ad.dtype, ad.n_layers
        self.hs, self.xp, self.xm, self.at, self.qkv, self.rs, self.pe_of = ([None] * L for _ in range(7))
        self.layer_of = {id(ad.attn(li)): li for li in range(L)}
        self.pos: dict = {}  # the model's (cos, sin) tensors -> their copy: shared by the layers using one base

    def register(self, store_attention: bool) -> list:
        ad, handles = self.ad, []
        for li, layer in enumerate(ad.layers()):
            handles.append(layer.register_forward_pre_hook(self.layer_pre(li), with_kwargs=True))
            handles.append(ad.attn(li).register_forward_pre_hook(self.attn_pre(li), with_kwargs=True))
            handles.append(ad.mid_module(li).register_forward_pre_hook(self.mid_pre(li)))
            if ad.post_attn_norm(li) is not None:
                handles.append(ad.post_attn_norm(li).register_forward_pre_hook(self.post_norm_pre(li)))
            if store_attention:
                handles.append(ad.attn(li).register_forward_hook(self.attn_out(li), with_kwargs=True))
        return handles

    def attn_pre(self, li: int):
        def hook(mod, args, kwargs):
            self.hs[li] = _hidden_arg(args, kwargs)[0].detach().to(self.dt)
            pe = kwargs.get("position_embeddings")
            if pe is not None:
                key = (pe[0].data_ptr(), pe[1].data_ptr())
                if key not in self.pos:
                    self.pos[key] = (pe[0][0].detach().to(self.dt), pe[1][0].detach().to(self.dt))
                self.pe_of[li] = self.pos[key]
        return hook

    def post_norm_pre(self, li: int):
        def hook(mod, args):
            self.rs[li] = self.ad.row_scale(li, args[0][0, self.row_start:].detach())
        return hook

    def layer_pre(self, li: int):
        def hook(mod, args, kwargs):
            self.xp[li] = _hidden_arg(args, kwargs)[0, self.row_start:].detach().to(self.dt, copy=True)
        return hook

    def attn_out(self, li: int):
        def hook(mod, args, kwargs, out):
            w = out[1] if isinstance(out, tuple) and len(out) > 1 else None
            if w is None:
                raise UnsupportedModelError("no attention probabilities returned: load the model with "
                                            "attn_implementation='eager' or use recompute_attention=True")
            self.at[li] = w[0, :, self.row_start:, :].detach().to(self.dt, copy=True)
        return hook

    def mid_pre(self, li: int):
        def hook(mod, args):
            self.xm[li] = args[0][0, self.row_start:].detach().to(self.dt, copy=True)
            if li == self.ad.n_layers - 1:
                raise _StopForward
        return hook

    def record(self, module, query, key, value, lse) -> None:
        """``recording_attention``'s callback: the kernel's own q/k/v (and log-sum-exp) of a layer."""
        li, r, dt = self.layer_of[id(module)], self.row_start, self.dt
        self.hs[li] = None  # the recorded q/k/v replace the attention input (T x d per layer: 0.57 GiB at 8k)
        self.qkv[li] = (query[0, :, r:].to(dt).contiguous(), key[0].to(dt).contiguous(), value[0].to(dt).contiguous(),
                        None if lse is None else lse[0, :, r:].to(dt).contiguous())

    def layers(self) -> list[LayerCapture]:
        out = [LayerCapture(h=self.hs[i], x_prev=self.xp[i], x_mid=self.xm[i], attn=self.at[i], row_scale=self.rs[i],
                            pos_emb=self.pe_of[i]) for i in range(self.ad.n_layers)]
        for lc, rec in zip(out, self.qkv):
            if rec is not None:
                lc.q, lc.kv, lc.lse = rec[0], (rec[1], rec[2]), rec[3]
        return out


@torch.no_grad()
def capture(model, input_ids: torch.Tensor, row_start: int, *, store_attention: bool = False,
            forward_attn_impl: Optional[str] = None) -> Capture:
    """Run one forward pass over ``input_ids`` (T,) and keep what IFR needs for rows ``row_start..T-1``.

    ``store_attention`` keeps the eager attention probabilities of those rows (needs an eager model);
    otherwise they are recomputed per layer later. ``forward_attn_impl`` (e.g. "sdpa") switches the kernel for this
    pass only; ignored when attention is stored (that needs eager). Everything is kept in float32, or in float64 when
    the model is float64. The pass stops at the last layer's ``x_mid`` (nothing after it is read).
    """
    t0 = time.perf_counter()
    ad = adapter_for(model)
    ids = input_ids.reshape(1, -1).to(next(model.parameters()).device)
    rec = _Recorder(ad, row_start)
    handles = rec.register(store_attention)
    try:
        with attention_kernel(model, "eager" if store_attention else forward_attn_impl), \
                recording_attention(model, rec.record):
            model.base_model(input_ids=ids, use_cache=False)
    except _StopForward:
        pass
    finally:
        for hd in handles:
            hd.remove()
    return Capture(adapter=ad, layers=rec.layers(), row_start=row_start, T=int(ids.shape[1]),
                   seconds=time.perf_counter() - t0)
