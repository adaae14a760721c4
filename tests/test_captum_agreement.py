"""Captum as a second implementation: integrated_gradients and input_x_gradient (baselines.py) against Captum's
LayerIntegratedGradients (on the embedding layer, EOS-token baseline) and InputXGradient (on the input embeddings), on
the same tiny models and inputs, reduced the same way (sum over the embedding dimension) for every generated token.

Captum's "riemann_trapezoid" uses the points alpha_k = k / (n - 1) as we do but step weights 1 / n (halved at both
ends), which sum to (n - 1) / n; our weights are 1 / (n - 1) (halved at both ends), the trapezoid rule proper, which
sums to 1. So ours = Captum's x n / (n - 1), exactly, and the test says so.

Tolerance: both sides compute the same float32 gradients, differing only in how the points are batched and the order of
the sums (float32 rounding, about 1e-7 relative). Measured: IG differs by at most 2e-7 of the largest attribution, input
x gradient by 0. 1e-5 of the largest attribution leaves a 50x margin and still catches any wrong point, weight, baseline
or position (each changes entries by 1e-2 relative or more; leaving out the n / (n - 1) factor is a 5% error).
"""

import numpy as np
import pytest
import torch
from captum.attr import InputXGradient, LayerIntegratedGradients

from ctxbench.attribution import InputXGradientAttributor, IntegratedGradientsAttributor
from ctxbench.attribution.base import InputContext, causal_column_mask

from helpers.tiny_models import FakeTokenizer, make_input, tiny_model

STEPS = 20


def logprob_of(model, ctx, t):
    """Captum's forward function: log p(y_t) (teacher forcing, read where token t is predicted), one per batch row."""
    target = int(ctx.input_ids[ctx.gen_start + t])

    def forward(**inputs):
        logits = model(**inputs, use_cache=False).logits[:, ctx.gen_start + t - 1].float()
        return torch.log_softmax(logits, -1)[:, target]
    return forward


def to_matrix(ctx, per_token: list) -> np.ndarray:
    """Rows of (T,) scores over absolute positions -> our (G, P+G) layout with the causal columns only."""
    full = torch.stack(per_token)
    A = ctx.to_columns(full).detach().numpy()
    return np.where(causal_column_mask(ctx.P, ctx.G), A, 0.0)


def assert_agree(ours: np.ndarray, theirs: np.ndarray) -> None:
    scale = np.abs(theirs).max()
    assert scale > 1e-3  # a real signal, not two matrices of zeros
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5 * scale)


@pytest.fixture(params=["llama", "gemma3", "gpt2"])
def case(request):
    model = tiny_model(request.param)
    for p in model.parameters():
        p.requires_grad_(False)
    mi = make_input(T=16, gen_start=10, template=2, seed=3)
    return model, mi, InputContext.from_model_input(model, mi)


def test_integrated_gradients_agree_with_captum(case):
    model, mi, ctx = case
    tok = FakeTokenizer()
    ours = IntegratedGradientsAttributor(ig_steps=STEPS, ig_batch=4).attribute(model, tok, mi).matrix
    ids = ctx.input_ids.view(1, -1)
    baseline = torch.full_like(ids, tok.eos_token_id)
    rows = []
    for t in range(ctx.G):
        lig = LayerIntegratedGradients(lambda input_ids, f=logprob_of(model, ctx, t): f(input_ids=input_ids),
                                       model.get_input_embeddings())
        attr = lig.attribute(ids, baselines=baseline, n_steps=STEPS, method="riemann_trapezoid",
                             internal_batch_size=5)
        rows.append(attr[0].sum(-1))
    assert_agree(ours, to_matrix(ctx, rows) * STEPS / (STEPS - 1))


def test_input_x_gradient_agrees_with_captum(case):
    model, mi, ctx = case
    ours = InputXGradientAttributor().attribute(model, FakeTokenizer(), mi).matrix
    embeds = model.get_input_embeddings()(ctx.input_ids.view(1, -1)).detach()
    rows = []
    for t in range(ctx.G):
        ixg = InputXGradient(lambda e, f=logprob_of(model, ctx, t): f(inputs_embeds=e))
        rows.append(ixg.attribute(embeds.clone().requires_grad_(True))[0].sum(-1))
    assert_agree(ours, to_matrix(ctx, rows))
