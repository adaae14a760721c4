"""AttnLRP's propagation rules (Achtibat et al., "AttnLRP: Attention-Aware Layer-Wise Relevance Propagation for
Transformers", ICML 2024) as modified gradients, and the hooks that put them on a Llama-like or GPT-2 decoder.

Gradient x input form: the relevance of a tensor x is ``R_x = x * g_x``, g the gradient of the modified backward
pass. Each rule keeps the forward value and changes only the gradient, so that ``x * g_x`` is what the rule assigns:

- epsilon rule, linear layer ``z = W x + b``: ``g_x = W^T (g_z * z / (z + eps sign z))``, i.e.
  ``R_x_i = sum_j x_i W_ji R_z_j / (z_j + eps sign z_j)`` (sign 0 = +1); the bias and eps keep the rest.
- identity rule, elementwise activation ``a = f(x)`` (SiLU, GELU): ``g_x = g_a * a / x``, so ``R_x = R_a``.
- identity rule, normalisation (RMSNorm, LayerNorm): the normaliser (1/rms, 1/std) is a constant of the backward
  pass; what is left is linear (RMSNorm conserves, LayerNorm's bias keeps its share, its centring conserves).
- uniform rule, product of two activations (a gated MLP's ``act(gate) * up``; attention's ``A V`` and ``Q K^T``):
  each factor receives half, by halving the gradient into each. Q and K get 1/4 (half of the half A receives), V 1/2.
  Rotary embeddings and Qwen3's q/k norms lie between the projections and the product; both are linear in the backward
  pass, so scaling the projection's gradient is the same.
- softmax: the plain gradient is already the paper's rule, ``R_x = x (R_s - s sum R_s)``; the first-order Taylor bias
  at the softmax input keeps the rest.

Relevance is therefore conserved from the explained logit down to the first layer's input, up to the biases, eps
and the softmax Taylor terms (docs/attribution.md, "AttnLRP").
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Optional, Union

import torch
from torch import nn

from ctxbench.attribution.families import UnsupportedModelError, adapter_for

Scale = Union[float, torch.Tensor]


class _GradRule(torch.autograd.Function):
    """Identity forward; the backward multiplies the gradient by ``scale`` and, for eps > 0, by z / (z + eps sign z)."""

    generate_vmap_rule = True  # lets autograd.grad(is_grads_batched=True) explain several outputs in one call

    @staticmethod
    def forward(z, eps, scale):
        return z.view_as(z)

    @staticmethod
    def setup_context(ctx, inputs, output):
        z, eps, scale = inputs
        ctx.eps, ctx.scale = eps, scale
        if eps > 0:
            ctx.save_for_backward(z)

    @staticmethod
    def backward(ctx, g):
        g = g * ctx.scale
        if ctx.eps > 0:
            (z,) = ctx.saved_tensors
            g = g * z / (z + ctx.eps * torch.where(z >= 0, 1.0, -1.0).to(z.dtype))
        return g, None, None


class _IdentityRule(torch.autograd.Function):
    """Forward returns ``a = f(x)``; the backward sends ``g * a / x`` to x (0 where x = 0, where R_a = 0 too) and
    nothing through f."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, a):
        return a.view_as(a)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, a = (t.detach() for t in inputs)
        ctx.save_for_backward(torch.where(x != 0, a / torch.where(x != 0, x, 1.0), 0.0))

    @staticmethod
    def backward(ctx, g):
        (ratio,) = ctx.saved_tensors
        return g * ratio, None


def linear_rule(z: torch.Tensor, eps: float = 0.0, scale: Scale = 1.0) -> torch.Tensor:
    """Put the epsilon rule (and a uniform-rule share ``scale``) on the output z of a linear layer."""
    if eps == 0 and isinstance(scale, float) and scale == 1.0:
        return z  # the plain gradient is the epsilon rule with eps = 0
    return _GradRule.apply(z, float(eps), scale)


def uniform_rule(product: torch.Tensor, factors: int = 2) -> torch.Tensor:
    """Split the relevance of a product of ``factors`` input-dependent activations evenly between them."""
    return _GradRule.apply(product, 0.0, 1.0 / factors)


def identity_rule(x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``a = f(x)`` for an elementwise f, passing relevance through unchanged (R_x = R_a)."""
    return _IdentityRule.apply(x, a)


def frozen_norm(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The norm's output recomputed from x with the normaliser detached (a constant of the backward pass)."""
    if isinstance(module, nn.LayerNorm):
        centred = x - x.mean(-1, keepdim=True)
        y = centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + module.eps).detach()
        if module.weight is not None:
            y = y * module.weight
        return y + module.bias if module.bias is not None else y
    if _known_norm(module):  # Llama/Qwen/Mistral RMSNorm (float32 at least, float64 kept)
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        if _gemma_norm(module):  # Gemma: eps inside, gain (1 + w) applied before the cast back
            inv_rms = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + module.eps).detach()
            return (xf * inv_rms * (1.0 + module.weight.to(xf.dtype))).to(x.dtype)
        inv_rms = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + module.variance_epsilon).detach()
        return module.weight * (xf * inv_rms).to(x.dtype)
    raise _unknown_norm(module)


def _unknown_norm(module: nn.Module) -> UnsupportedModelError:
    return UnsupportedModelError(f"{type(module).__name__}: AttnLRP knows RMSNorm (Llama/Qwen, Gemma) and LayerNorm "
                                 f"only")


def _gemma_norm(module: nn.Module) -> bool:
    """Gemma's RMSNorm: ``x / rms(x) * (1 + w)`` (its weight starts at 0), eps in ``eps``."""
    return type(module).__name__.startswith("Gemma") and hasattr(module, "eps") and hasattr(module, "weight")


def _known_norm(module: nn.Module) -> bool:
    return isinstance(module, nn.LayerNorm) or _gemma_norm(module) or \
        (hasattr(module, "variance_epsilon") and hasattr(module, "weight"))


def _tolerance(dtype: torch.dtype) -> float:
    return 1e-4 if dtype in (torch.float32, torch.float64) else 3e-2


@dataclass
class LRPInput:
    """Filled during the instrumented forward pass: ``x0`` is the first layer's input (token embeddings, plus
    position embeddings for GPT-2) as a leaf, whose ``x0 * grad`` is the input relevance."""

    x0: Optional[torch.Tensor] = None


def _is_norm(module: nn.Module) -> bool:
    return isinstance(module, nn.LayerNorm) or type(module).__name__.endswith("Norm")


@contextlib.contextmanager
def attnlrp_rules(model, epsilon: float = 0.0) -> Iterator[LRPInput]:
    """Hooks that record the AttnLRP rules in the autograd graph of every forward pass run inside the block; the
    backward passes may come later (the rules live in the graph, the hooks are removed on exit).

    Supported: Llama/Mistral/Qwen2/Qwen3-like decoders with a gated MLP, and GPT-2; anything else raises
    ``UnsupportedModelError`` before a pass runs."""
    ad = adapter_for(model)
    probe = LRPInput()
    plan = [ad.lrp_plan(li) for li in range(ad.n_layers)]
    norms = [m for m in model.base_model.modules() if _is_norm(m)]
    for m in norms:
        if not _known_norm(m):
            raise _unknown_norm(m)
    handles = []
    try:
        handles.append(ad.layers()[0].register_forward_pre_hook(_input_probe(probe), with_kwargs=True))
        seen = set()  # an activation module may be shared between layers: one rule each
        for linears, act, product_sink in plan:
            for lin, share in linears:
                handles.append(lin.register_forward_hook(_linear_hook(share, epsilon)))
            if id(act) not in seen:
                seen.add(id(act))
                handles.append(act.register_forward_hook(_activation_hook))
            if product_sink is not None:
                handles.append(product_sink.register_forward_pre_hook(_product_hook))
        for m in norms:
            handles.append(m.register_forward_hook(_norm_hook))
        yield probe
    finally:
        for h in handles:
            h.remove()


def _linear_hook(share, epsilon: float):
    """The epsilon rule on a linear module's output, with its uniform-rule ``share`` (a number or a tensor)."""
    def hook(mod, args, out):
        s = share.to(out.device, out.dtype) if isinstance(share, torch.Tensor) else share
        return linear_rule(out, epsilon, s)
    return hook


def _activation_hook(mod, args, out):
    return identity_rule(args[0], out)


def _product_hook(mod, args):
    return (uniform_rule(args[0], 2),) + tuple(args[1:])


def _norm_hook(mod, args, out):
    """The norm's own value with the frozen normaliser's gradient; refused when the module does not compute the
    formula the rule freezes."""
    y = frozen_norm(mod, args[0])
    tol = _tolerance(out.dtype)
    # the norm acts on each position alone: one position shows whether the formula is the module's
    y1, o1 = (t.detach().reshape(-1, t.shape[-1])[-1].float() for t in (y, out))
    if not torch.allclose(y1, o1, rtol=tol, atol=tol * float(o1.abs().max().clamp_min(1.0))):
        raise UnsupportedModelError(f"{type(mod).__name__} does not compute the RMSNorm/LayerNorm AttnLRP knows")
    return out.detach() + (y - y.detach())


def _input_probe(probe: LRPInput):
    """The first layer's input made a leaf of the graph (``probe.x0``): relevance is read off its gradient."""
    def hook(mod, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        probe.x0 = hidden.detach().requires_grad_(True)
        if args:
            return (probe.x0,) + tuple(args[1:]), kwargs
        return args, {**kwargs, "hidden_states": probe.x0}
    return hook
