"""Multi-hop span IFR through the chain of thought (FlashTrace, ICML 2026): ``ifr_multi_hop`` and
``ifr_multi_hop_both``.

Vectors live over the full sequence (T) while hopping; ratios rho use the sum over the full sequence (template tokens
included), as FlashTrace's code does; everything is projected onto the P+G columns at the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, ClassVar, Optional

import numpy as np
import torch

from ctxbench.attribution.base import AttributionResult, empty_matrix, stop_mask
from ctxbench.attribution.capture import Capture
from ctxbench.attribution.ifr import IFRAttributorBase, IFRConfig, span_ifr
from ctxbench.core.part import param
from ctxbench.utils.tokens import eos_ids


@dataclass
class HopResult:
    observed: torch.Tensor  # (T,) o = sum_k rho_{k-1} * v_k * m (hop 0 with weight 1)
    hop_vectors: list  # [(T,)] v_0..v_K (zero vectors for hops skipped after the CoT mass vanished)
    rho: list  # rho_0..rho_K


HopVector = Callable[[torch.Tensor, Optional[torch.Tensor]], torch.Tensor]


def ifr_hop(cap: Capture, cfg: IFRConfig, keep: Optional[torch.Tensor] = None) -> HopVector:
    """Span IFR as the hop vector: ``(rows, weights) -> (T,)``; ``keep`` (T,) zeroes stop tokens."""

    def hop(rows, weights):
        v = span_ifr(cap, rows, weights, cfg)
        return v * keep if keep is not None else v
    return hop


def observation_mask(ctx, s_rows: torch.Tensor, t_rows: torch.Tensor, dtype: torch.dtype, device) -> torch.Tensor:
    """The mask m of §4.3 over the T positions: 1 except on T, on S and on every position after the end of T."""
    m = torch.ones(ctx.T, dtype=dtype, device=device)
    m[t_rows] = 0
    m[s_rows] = 0
    m[int(t_rows[-1]) + 1:] = 0
    return m


def hop_chain(cap: Capture, cfg: IFRConfig, hop0_rows: torch.Tensor, hop0_weights: Optional[torch.Tensor],
              hop_rows: torch.Tensor, obs_mask: torch.Tensor, hops: int,
              keep: Optional[torch.Tensor] = None) -> HopResult:
    """The recursion with span-IFR hop vectors; ``keep`` (T,) zeroes stop tokens in every hop vector (the mask is
    expected to include it)."""
    return hop_recursion(ifr_hop(cap, cfg, keep), hop0_rows, hop0_weights, hop_rows, obs_mask, hops)


def hop_recursion(hop: HopVector, hop0_rows: torch.Tensor, hop0_weights: Optional[torch.Tensor],
                  hop_rows: torch.Tensor, obs_mask: torch.Tensor, hops: int, scale_by_rho: bool = True) -> HopResult:
    """The shared recursion: hop 0 over ``hop0_rows``, then K hops over ``hop_rows`` weighted by the previous hop's
    mass on them. ``hop(rows, weights)`` gives one hop vector over the T positions (span IFR, AttnLRP). With
    ``scale_by_rho=False`` every hop counts with weight 1 in the observed vector (rho is still reported)."""

    def cot_share(v, prev_rho):
        """The next hop's weights (v's mass on the CoT rows) and rho_k = rho_{k-1} * CoT mass / total mass (sums in
        float64)."""
        w, tot = v[hop_rows], float(v.sum(dtype=torch.float64))
        return w, (prev_rho * float(w.sum(dtype=torch.float64)) / tot if tot > 0 else 0.0)

    v = hop(hop0_rows, hop0_weights)
    observed = v.to(torch.float64) * obs_mask  # accumulated in float64, returned in v's dtype
    w, r = cot_share(v, 1.0)
    vecs, rho = [v], [r]
    for _ in range(int(hops)):
        if float(w.sum(dtype=torch.float64)) <= 0 or rho[-1] <= 0:  # no mass left in the CoT: later hops add nothing
            vecs.append(torch.zeros_like(v))
            rho.append(0.0)
            continue
        v = hop(hop_rows, w)
        observed += (rho[-1] if scale_by_rho else 1.0) * (v.to(torch.float64) * obs_mask)
        vecs.append(v)
        w, r = cot_share(v, rho[-1])
        rho.append(r)
    return HopResult(observed.to(v.dtype), vecs, rho)


def _result(self, ctx, hr: HopResult, obs_mask, rows_written, **extra) -> AttributionResult:
    A = empty_matrix(ctx.G, ctx.P)
    o = ctx.to_columns(hr.observed).cpu().numpy()
    A[rows_written] = o
    return AttributionResult(
        matrix=A, method=self.name, P=ctx.P, G=ctx.G,
        hop_vectors=ctx.to_columns(torch.stack(hr.hop_vectors)).cpu().numpy().astype(np.float32),
        rho=[float(r) for r in hr.rho], observation_mask=ctx.to_columns(obs_mask).cpu().numpy(),
        rows_written=np.asarray(rows_written, dtype=np.int64), **extra)


@dataclass
class MultiHopIFRAttributor(IFRAttributorBase):
    """S = sink span (whole generation if None), T = thinking span (S if None); ``hops`` K through the CoT."""

    name: ClassVar[str] = "ifr_multi_hop"
    hops: int = param(1, ge=0)  # Table 1: 1 for faithfulness, 3 for recovery

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        sink = sink or (0, ctx.G - 1)
        think = think or sink
        with torch.no_grad():
            cap = self._capture(model, ctx, timings)
            t0 = time.perf_counter()
            dev = cap.device
            s_rows, t_rows = ctx.gen_rows(sink), ctx.gen_rows(think)
            m = observation_mask(ctx, s_rows, t_rows, cap.dtype, dev)
            hr = hop_chain(cap, self.cfg, s_rows, None, t_rows, m, self.hops)
            timings["attribution"] = time.perf_counter() - t0
        return _result(self, ctx, hr, m, np.arange(sink[0], sink[1] + 1))


@dataclass
class MultiHopBothAttributor(IFRAttributorBase):
    """FlashTrace (paper Table 1): multi-hop with stop tokens soft-deleted and hops over ``all_gen``.

    Stop tokens get weight 0 as sinks and are zeroed in every hop vector and in the observation mask; a final EOS is
    never a sink. ``all_gen`` = [min(S.start, T.start), max(S.end, T.end)] when both spans are given, else the whole
    generation without EOS. ``hop0``: "all_gen" (Table-1 behaviour, default) or "sink" (hop 0 over S only).
    Rows are written for the non-stop tokens of S.
    """

    name: ClassVar[str] = "ifr_multi_hop_both"
    deletion_set: ClassVar[str] = "nonstop"  # its result carries prompt_stop_mask
    hops: int = param(1, ge=0)
    hop0: str = param("all_gen", choices=("all_gen", "sink"))

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        G = ctx.G
        gen_ids = ctx.input_ids[ctx.gen_start:]
        last = G - 1 - (1 if int(gen_ids[-1]) in eos_ids(tokenizer) else 0)
        if last < 0:
            raise ValueError("nothing to attribute: the generation is only EOS")
        if sink is not None and sink[0] > last:
            raise ValueError(f"sink_span={list(sink)} covers only the EOS token")
        if sink is not None and think is not None:
            all_gen = (min(sink[0], think[0]), min(last, max(sink[1], think[1])))
        else:
            all_gen = (0, last)
        sink = (sink[0], min(sink[1], last)) if sink is not None else all_gen
        p_stop = stop_mask(tokenizer, ctx.input_ids[ctx.prompt_positions])
        g_stop = stop_mask(tokenizer, gen_ids)
        with torch.no_grad():
            cap = self._capture(model, ctx, timings)
            t0 = time.perf_counter()
            dev = cap.device
            dt = cap.dtype
            keep = torch.ones(ctx.T, dtype=dt, device=dev)
            keep[ctx.prompt_positions] = torch.as_tensor(~p_stop, dtype=dt, device=dev)
            keep[ctx.gen_start:] = torch.as_tensor(~g_stop, dtype=dt, device=dev)
            a_rows = ctx.gen_rows(all_gen)
            m = torch.ones(ctx.T, dtype=dt, device=dev)
            m[int(a_rows[0]):] = 0  # all_gen and everything after it
            m *= keep
            h0_rows = a_rows if self.hop0 == "all_gen" else ctx.gen_rows(sink)
            hr = hop_chain(cap, self.cfg, h0_rows, keep[h0_rows], a_rows, m, self.hops, keep=keep)
            timings["attribution"] = time.perf_counter() - t0
        rows = np.array([t for t in range(sink[0], sink[1] + 1) if not g_stop[t]], dtype=np.int64)
        return _result(self, ctx, hr, m, rows, prompt_stop_mask=p_stop, gen_stop_mask=g_stop)
