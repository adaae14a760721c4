"""AttnLRP (docs/attribution.md, "AttnLRP"): ``attnlrp``, the relevance of each generated token's logit for every
input token, and ``ft_attnlrp``, the multi-hop recursion of FlashTrace with AttnLRP hop vectors.

One forward pass under the rules of ``lrp_rules`` builds the graph; each explained combination of logits is one
backward pass through it. Relevance is linear in what is explained, so the relevance of ``sum_t w_t logit_t`` is the
same sum of the per-token relevances: a hop over a span costs one backward pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np
import torch

from ctxbench.attribution.base import Attributor
from ctxbench.attribution.baselines import _Baseline, _predicting_rows, explaining
from ctxbench.attribution.lrp_rules import attnlrp_rules, linear_rule
from ctxbench.attribution.memory import Need, eager_attention, result_matrix, saved_for_backward
from ctxbench.attribution.multi_hop import _result, hop_recursion, observation_mask
from ctxbench.models.attention import attention_kernel
from ctxbench.core.part import neutral, param


class LRPPass:
    """One forward pass of ``model`` over the whole input under the AttnLRP rules, keeping the graph, then one
    backward pass per call of ``relevance``.

    ``logits`` (G,): the logit of generated token t where it is predicted (position gen_start + t - 1), the explained
    quantity of FlashTrace's AttnLRP baseline. ``x0`` (1, T, d): the first layer's input, whose ``x0 * gradient``
    (summed over d) is the token relevance.
    """

    def __init__(self, model, ctx, epsilon: float, attn_impl: Optional[str]):
        with attnlrp_rules(model, epsilon) as probe, attention_kernel(model, attn_impl):
            hidden = model.base_model(input_ids=ctx.input_ids.view(1, -1), use_cache=False).last_hidden_state[0]
        head = model.get_output_embeddings()
        targets = ctx.input_ids[ctx.gen_start:]
        # only the G explained logits of the LM head, not its T x vocabulary output
        z = (hidden[_predicting_rows(ctx)] * head.weight[targets]).sum(-1)
        if getattr(head, "bias", None) is not None:
            z = z + head.bias[targets]
        self.logits = linear_rule(z, epsilon)
        self.x0 = probe.x0

    def relevance(self, weights: torch.Tensor) -> torch.Tensor:
        """Input relevance of ``sum_t weights[t] logit_t``: weights (G,) -> (T,); (B, G) -> (B, T), one batched
        backward pass for B combinations. float32, or float64 for a float64 model."""
        batched = weights.dim() == 2
        (g,) = torch.autograd.grad(self.logits, self.x0, grad_outputs=weights.to(self.logits.dtype),
                                   retain_graph=True, is_grads_batched=batched)
        dt = torch.promote_types(self.x0.dtype, torch.float32)
        return (g.to(dt) * self.x0.detach().to(dt)).sum(-1).squeeze(-2)


@dataclass
class _LRPMethod(Attributor):
    """Parameters both AttnLRP methods share. ``epsilon``: the epsilon rule's stabiliser on every linear layer (0,
    the default, is the plain gradient there, as in FlashTrace's code and the LXT package); ``forward_attn_impl``: the
    attention kernel of the pass ("sdpa" needs no T x T matrix per layer in the backward pass on CPU; the gradients
    are the same up to rounding); ``None`` keeps the loaded kernel."""

    epsilon: float = param(0.0, ge=0)
    forward_attn_impl: Optional[str] = "sdpa"

    def memory_need(self, shape, T, G):
        # the G explained logits are formed without the vocabulary projection; hop vectors are (T,) each
        return Need(saved_for_backward(shape, T) + eager_attention(shape, T, self.forward_attn_impl, kept=True)
                    + 2 * result_matrix(T, G),
                    f"the activations of {shape.layers} layers kept for the backward passes")

    def _lrp_pass(self, model, ctx, timings) -> LRPPass:
        t0 = time.perf_counter()
        lp = LRPPass(model, ctx, float(self.epsilon), self.forward_attn_impl)
        timings["capture"] = time.perf_counter() - t0
        return lp


@dataclass
class AttnLRPAttributor(_LRPMethod, _Baseline):
    """Row t: AttnLRP relevance of generated token t's logit for each column (the causal past; raw, signed).
    ``row_batch`` rows share one batched backward pass (more memory, fewer passes)."""

    name: ClassVar[str] = "attnlrp"
    row_batch: int = neutral(1, ge=1)

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        with explaining(model):
            lp = self._lrp_pass(model, ctx, timings)
            t0 = time.perf_counter()
            rows = torch.as_tensor(ctx.row_indices(), device=lp.logits.device)
            eye = torch.eye(ctx.G, device=lp.logits.device)[rows]
            full = torch.cat([lp.relevance(eye[i:i + self.row_batch] if self.row_batch > 1 else eye[i])
                              .reshape(-1, ctx.T) for i in range(0, len(rows), self.row_batch)])
        return self._finish(ctx, full, timings, t0)


NEG_HANDLING = ("drop", "abs")
NORM_MODES = ("norm", "no_norm")


@dataclass
class FTAttnLRPAttributor(_LRPMethod):
    """The multi-hop recursion of ``ifr_multi_hop`` (S = sink span or the whole generation, T = thinking span or S)
    with AttnLRP hop vectors: hop k explains the logits of its rows weighted as the recursion says.

    Each hop vector keeps only the prompt and generated tokens (template tokens 0), then ``neg_handling``: "drop"
    (negative relevance -> 0, FlashTrace's default) or "abs"; with ``norm_mode="norm"`` (default) the explained
    weights and each hop vector are normalised to sum 1 and later hops count with the ratio rho, with "no_norm"
    neither is normalised and every hop counts 1, as in FlashTrace's code.
    """

    name: ClassVar[str] = "ft_attnlrp"
    hops: int = param(1, ge=0)
    neg_handling: str = param("drop", choices=NEG_HANDLING)
    norm_mode: str = param("norm", choices=NORM_MODES)

    def _hop(self, lp: LRPPass, ctx):
        norm = self.norm_mode == "norm"
        on_columns = torch.zeros(ctx.T, dtype=lp.x0.dtype, device=lp.x0.device)
        on_columns[ctx.columns] = 1

        def hop(rows, weights):
            w = torch.zeros(ctx.G, dtype=torch.float64, device=lp.x0.device)
            w[rows - ctx.gen_start] = 1.0 if weights is None else weights.to(torch.float64)
            if norm:
                w = w / w.sum()
            r = lp.relevance(w)
            v = (r.clamp_min(0) if self.neg_handling == "drop" else r.abs()) * on_columns.to(r.dtype)
            if norm:
                tot = v.sum(dtype=torch.float64)
                v = v / tot if tot > 0 else torch.zeros_like(v)
            return v
        return hop

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        sink = sink or (0, ctx.G - 1)
        think = think or sink
        with explaining(model):
            lp = self._lrp_pass(model, ctx, timings)
            t0 = time.perf_counter()
            s_rows, t_rows = ctx.gen_rows(sink), ctx.gen_rows(think)
            dt = torch.promote_types(lp.x0.dtype, torch.float32)
            m = observation_mask(ctx, s_rows, t_rows, dt, lp.x0.device)
            hr = hop_recursion(self._hop(lp, ctx), s_rows, None, t_rows, m, self.hops,
                               scale_by_rho=self.norm_mode == "norm")
            timings["attribution"] = time.perf_counter() - t0
        return _result(self, ctx, hr, m, np.arange(sink[0], sink[1] + 1))
