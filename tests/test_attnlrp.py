"""AttnLRP and ft_attnlrp: each rule against a numpy computation of the paper's formula, one attention head against an
explicit layer-by-layer LRP written in numpy, relevance conservation on tiny Llama/Qwen2/Qwen3/GPT-2 models (and,
slow, SmolLM2) with every absorbed term computed from its own hook, the epsilon -> 0 limit, and ft_attnlrp against
weighted sums of attnlrp rows."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers.pytorch_utils import Conv1D

from ctxbench.attribution import UnsupportedModelError, views
from ctxbench.attribution import attnlrp as al
from ctxbench.attribution.attnlrp import AttnLRPAttributor, FTAttnLRPAttributor, LRPPass
from ctxbench.attribution.base import InputContext
from ctxbench.attribution.lrp_rules import identity_rule, linear_rule, uniform_rule

from helpers.tiny_models import FakeTokenizer, family_members, make_input, story_input, tiny_model

FAMILIES = family_members()  # one tiny decoder per member of every family (attribution.families.FAMILIES)


def _f64(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape)


def _gxi(x: torch.Tensor, out: torch.Tensor) -> np.ndarray:
    (g,) = torch.autograd.grad(out, x)
    return (x * g).detach().numpy()


# --- the rules, one at a time, against numpy ----------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.0, 0.05, 1.0])
def test_epsilon_rule_on_a_linear_layer(eps):
    x, W, b, c = _f64(5), _f64(3, 5, seed=1), _f64(3, seed=2), _f64(3, seed=3)
    xt = torch.tensor(x, requires_grad=True)
    z = linear_rule(F.linear(xt, torch.tensor(W), torch.tensor(b)), eps)
    R = _gxi(xt, (torch.tensor(c) * z).sum())  # explains c . z, so R_z = c * z
    zn = W @ x + b
    Rz = c * zn
    denom = zn + eps * np.where(zn >= 0, 1.0, -1.0)
    expect = (x[None, :] * W * (Rz / denom)[:, None]).sum(0)  # R_i = sum_j x_i W_ji R_j / (z_j + eps sign z_j)
    np.testing.assert_allclose(R, expect, rtol=1e-12, atol=1e-14)
    # what the inputs do not get, the bias and eps keep: b_j R_j / den_j and eps s_j R_j / den_j
    kept = (b * Rz / denom).sum() + (eps * np.where(zn >= 0, 1.0, -1.0) * Rz / denom).sum()
    assert R.sum() + kept == pytest.approx(Rz.sum(), rel=1e-12)


def test_uniform_rule_on_an_elementwise_product():
    x, A, B, c = _f64(4), _f64(6, 4, seed=1), _f64(6, 4, seed=2), _f64(6, seed=3)
    xt = torch.tensor(x, requires_grad=True)
    p = uniform_rule((torch.tensor(A) @ xt) * (torch.tensor(B) @ xt), 2)
    R = _gxi(xt, (torch.tensor(c) * p).sum())
    a, bb = A @ x, B @ x
    Rp = c * a * bb
    # each factor gets R_p / 2, then the linear maps (eps 0) pass it to x: x_i A_ji (R_p_j / 2) / a_j + same for B
    expect = (x[None] * A * (Rp / 2 / a)[:, None]).sum(0) + (x[None] * B * (Rp / 2 / bb)[:, None]).sum(0)
    np.testing.assert_allclose(R, expect, rtol=1e-10)
    assert R.sum() == pytest.approx(Rp.sum(), rel=1e-12)  # a product of two linear maps conserves exactly


def test_softmax_rule_is_the_plain_gradient():
    x, c = _f64(7), _f64(7, seed=1)
    xt = torch.tensor(x, requires_grad=True)
    R = _gxi(xt, (torch.tensor(c) * torch.softmax(xt, -1)).sum())
    s = np.exp(x - x.max())
    s /= s.sum()
    Rs = c * s
    np.testing.assert_allclose(R, x * (Rs - s * Rs.sum()), rtol=1e-12, atol=1e-15)  # R_x = x (R_s - s sum R_s)


def test_identity_rule_on_an_activation():
    x = torch.tensor([-2.0, -0.3, 0.0, 0.4, 3.0], dtype=torch.float64, requires_grad=True)
    a = identity_rule(x, F.silu(x))
    c = torch.tensor([1.0, -2.0, 3.0, 0.5, 2.0], dtype=torch.float64)
    R = _gxi(x, (c * a).sum())
    np.testing.assert_allclose(R, (c * F.silu(x)).detach().numpy(), rtol=1e-14)  # R_x = R_a, also at x = 0


def test_one_attention_head_against_explicit_lrp():
    """q, k, v projections of h, causal softmax attention, output o; the gradient x input form with the shares of
    lrp_rules (q, k: 1/4, v: 1/2) equals LRP propagated rule by rule in numpy: uniform rule on A V, softmax rule,
    uniform rule on Q K^T, epsilon rule (eps 0) on the projections."""
    T, d, e = 5, 4, 3
    h, Wq, Wk, Wv, C = _f64(T, d), _f64(e, d, seed=1), _f64(e, d, seed=2), _f64(e, d, seed=3), _f64(T, e, seed=4)
    scale = e ** -0.5
    mask = np.triu(np.full((T, T), -1e300), 1)
    ht = torch.tensor(h, requires_grad=True)
    q = linear_rule(ht @ torch.tensor(Wq).T, 0.0, 0.25)
    k = linear_rule(ht @ torch.tensor(Wk).T, 0.0, 0.25)
    v = linear_rule(ht @ torch.tensor(Wv).T, 0.0, 0.5)
    A = torch.softmax(q @ k.T * scale + torch.tensor(mask), -1)
    R = _gxi(ht, (torch.tensor(C) * (A @ v)).sum()).sum(-1)

    qn, kn, vn = h @ Wq.T, h @ Wk.T, h @ Wv.T
    xs = qn @ kn.T * scale
    An = np.exp(xs + mask - (xs + mask).max(-1, keepdims=True))
    An /= An.sum(-1, keepdims=True)
    o = An @ vn
    Ro = C * o
    share = An[:, :, None] * vn[None, :, :] / o[:, None, :] * Ro[:, None, :]  # (i, j, d): term A_ij v_jd of o_id
    R_A, R_v = share.sum(2) / 2, share.sum(0) / 2
    R_x = np.where(mask < 0, 0.0, xs) * (R_A - An * R_A.sum(-1, keepdims=True))
    qk = qn[:, None, :] * kn[None, :, :] * scale / np.where(mask < 0, 1.0, xs)[:, :, None] * R_x[:, :, None]
    R_q, R_k = qk.sum(1) / 2, qk.sum(0) / 2

    def back(Rz, W, z):  # epsilon rule (eps 0) through z = h W^T, summed over the embedding
        return (h[:, None, :] * W[None] * (Rz / z)[:, :, None]).sum((1, 2))

    expect = back(R_q, Wq, qn) + back(R_k, Wk, kn) + back(R_v, Wv, vn)
    np.testing.assert_allclose(R, expect, rtol=1e-9, atol=1e-12)


# --- conservation on tiny models ----------------------------------------------------------------------------------


class Ledger:
    """Everything a backward pass leaves outside the input, from hooks of its own: the share of every bias (b . g at
    the module's output) and the Taylor terms of every softmax, ``s.g - (x s).g + (s.x)(s.g)`` per row; attention
    matrices carry half the relevance of ``A V`` (the other half goes to V), so half of that."""

    def __init__(self):
        self.terms = []  # (kind, value tensor or callable, gradient cell)

    def bias(self, b, out):
        cell = {}
        out.register_hook(lambda g: cell.__setitem__("g", g))
        self.terms.append(("bias", b.detach(), cell))

    def softmax(self, x, s):
        cell = {}
        s.register_hook(lambda g: cell.__setitem__("g", g))
        self.terms.append(("softmax", (x.detach(), s.detach()), cell))

    def clear_grads(self):
        for _, _, cell in self.terms:
            cell.clear()

    def absorbed(self) -> dict:
        out = {"bias": 0.0, "softmax": 0.0}
        for kind, val, cell in self.terms:
            if "g" not in cell:
                continue
            g = cell["g"].double()
            if kind == "bias":
                out["bias"] += float((g * val.double()).sum())
            else:
                x, s = (t.double() for t in val)
                x = torch.where(s > 0, x, 0.0)  # masked scores (s = 0) carry no term; avoids 0 * -inf
                sg = (s * g).sum(-1)
                row = sg - (x * s * g).sum(-1) + (s * x).sum(-1) * sg
                out["softmax"] += 0.5 * float(row.sum())
        return out


@contextlib.contextmanager
def ledger_on(model, monkeypatch):
    """Record biases and softmaxes while the rules are on; hooks on linear layers run before the rules' (they see
    the gradient the rule lets through), hooks on norms after (they see the gradient of the norm's final output)."""
    led = Ledger()
    real_rules = al.attnlrp_rules
    real_softmax = F.softmax

    @contextlib.contextmanager
    def rules(model, epsilon):
        with real_rules(model, epsilon) as probe:
            handles = []
            for mod in model.base_model.modules():
                b = getattr(mod, "bias", None)
                if not isinstance(b, nn.Parameter):
                    continue
                first = isinstance(mod, (nn.Linear, Conv1D))
                handles.append(mod.register_forward_hook(lambda m, a, o: led.bias(m.bias, o), prepend=first))
            try:
                yield probe
            finally:
                for hd in handles:
                    hd.remove()

    def softmax(x, dim=None, *args, **kw):
        s = real_softmax(x, dim, *args, **kw)
        led.softmax(x, s)
        return s

    monkeypatch.setattr(al, "attnlrp_rules", rules)
    monkeypatch.setattr(F, "softmax", softmax)
    try:
        yield led
    finally:
        monkeypatch.setattr(F, "softmax", real_softmax)


def _lrp_pass(model, mi, eps=0.0, monkeypatch=None):
    ctx = InputContext.from_model_input(model, mi)
    for p in model.parameters():
        p.requires_grad_(False)
    if monkeypatch is None:
        return ctx, LRPPass(model, ctx, eps, None), None
    with ledger_on(model, monkeypatch) as led:
        lp = LRPPass(model, ctx, eps, None)  # eager attention: the softmax hook sees every attention matrix
    return ctx, lp, led


@pytest.mark.parametrize("family", FAMILIES)
def test_conservation_on_tiny_models(family, monkeypatch):
    model = tiny_model(family).double()
    mi = make_input(T=20, gen_start=9)
    ctx, lp, led = _lrp_pass(model, mi, 0.0, monkeypatch)
    # the explained quantities are the model's own logits of the generated tokens
    with torch.no_grad():
        logits = model(input_ids=ctx.input_ids.view(1, -1)).logits[0]
    rows = torch.arange(ctx.gen_start - 1, ctx.T - 1)
    np.testing.assert_allclose(lp.logits.detach().numpy(), logits[rows, ctx.input_ids[ctx.gen_start:]].numpy(),
                               rtol=1e-10)
    worst, shares = 0.0, []
    for t in range(ctx.G):
        led.clear_grads()
        w = torch.zeros(ctx.G, dtype=torch.float64)
        w[t] = 1
        r_in = float(lp.relevance(w).sum())
        kept = led.absorbed()
        z = float(lp.logits[t].detach())
        worst = max(worst, abs(r_in + kept["bias"] + kept["softmax"] - z) / max(abs(z), 1e-3))
        shares.append((r_in, kept["bias"], kept["softmax"], z))
    print(f"{family}: worst relative conservation error {worst:.1e}")
    assert worst < 1e-6, (worst, shares[:3])
    # the absorbed terms are real (the test would not notice a rule that moved relevance into them otherwise)
    assert max(abs(s[2]) for s in shares) > 1e-3 * max(abs(s[3]) for s in shares)


def test_conservation_fails_with_wrong_attention_shares(monkeypatch):
    """The ledger notices a wrong rule: with q and k at 1/2 (the uniform rule applied to Q K^T only) relevance is
    no longer conserved."""
    from ctxbench.attribution.families import LlamaLikeAdapter

    real = LlamaLikeAdapter.lrp_plan

    def wrong(ad, li):
        linears, act, prod = real(ad, li)
        return [(m, 0.5 if s == 0.25 else s) for m, s in linears], act, prod

    monkeypatch.setattr(LlamaLikeAdapter, "lrp_plan", wrong)
    model = tiny_model("llama").double()
    ctx, lp, led = _lrp_pass(model, make_input(T=20, gen_start=9), 0.0, monkeypatch)
    led.clear_grads()
    w = torch.zeros(ctx.G, dtype=torch.float64)
    w[-1] = 1
    r_in, kept = float(lp.relevance(w).sum()), led.absorbed()
    z = float(lp.logits[-1].detach())
    assert abs(r_in + kept["bias"] + kept["softmax"] - z) > 1e-4 * abs(z)  # 100 x the tolerance above


def test_epsilon_limit():
    model = tiny_model("llama").double()
    mi = make_input(T=20, gen_start=9)
    ctx = InputContext.from_model_input(model, mi)
    for p in model.parameters():
        p.requires_grad_(False)
    w = torch.full((ctx.G,), 1.0 / ctx.G, dtype=torch.float64)
    base = LRPPass(model, ctx, 0.0, None).relevance(w)
    dist, total = [], []
    epsilons = (1e-1, 1e-2, 1e-3, 1e-4, 1e-6, 1e-7, 1e-8)
    for eps in epsilons:
        r = LRPPass(model, ctx, eps, None).relevance(w)
        dist.append(float((r - base).abs().max()))
        total.append(float(r.sum()))
    assert all(a > b for a, b in zip(dist, dist[1:])), dist  # closer to the eps = 0 relevance as eps shrinks
    assert dist[-1] < 1e-5 * float(base.abs().max())
    # and linearly so: dist / eps settles to the derivative at eps = 0 (this model's |z| are ~1e-3, so from ~1e-6)
    assert dist[-1] / epsilons[-1] == pytest.approx(dist[-2] / epsilons[-2], rel=0.05)
    # eps absorbs relevance: |sum R| shrinks as eps grows (each linear layer keeps eps / (|z| + eps) of it)
    assert all(abs(a) < abs(b) for a, b in zip(total, total[1:])) and total[-1] == pytest.approx(float(base.sum()),
                                                                                                  rel=1e-5)


# --- the methods ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_attnlrp_matrix(family):
    model = tiny_model(family)
    mi = make_input(T=20, gen_start=9)
    res = AttnLRPAttributor(forward_attn_impl=None).attribute(model, FakeTokenizer(), mi)
    assert all(p.requires_grad for p in model.parameters())  # the parameters are as they were
    P, G = mi.prompt_positions.numel(), 11
    assert res.matrix.shape == (G, P + G) and res.method == "attnlrp" and list(res.rows_written) == list(range(G))
    assert np.isfinite(res.matrix).all()
    for t in range(G):  # row t: the prompt and the tokens generated before t; nothing later
        assert not res.matrix[t, P + t:].any()
        assert np.abs(res.matrix[t, :P]).sum() > 0
    # row t is the input relevance of logit t, read at the prompt and generated columns
    ctx, lp, _ = _lrp_pass(model, mi)
    for t in (0, G - 1):
        w = torch.zeros(G)
        w[t] = 1
        np.testing.assert_allclose(res.matrix[t], ctx.to_columns(lp.relevance(w)).numpy() *
                                   np.r_[np.ones(P), np.arange(G) < t], rtol=1e-5, atol=1e-7)
    # batched rows and the fused attention kernel give the same matrix (up to kernel rounding)
    b = AttnLRPAttributor(forward_attn_impl=None, row_batch=4).attribute(model, FakeTokenizer(), mi)
    np.testing.assert_allclose(b.matrix, res.matrix, rtol=1e-5, atol=1e-7)
    s = AttnLRPAttributor().attribute(model, FakeTokenizer(), mi)
    np.testing.assert_allclose(s.matrix, res.matrix, rtol=1e-3, atol=1e-5 * np.abs(res.matrix).max())
    assert model.config._attn_implementation == "eager"  # the temporary kernel switch was undone


def _post(v, neg="drop", norm=True):
    v = np.clip(v, 0, None) if neg == "drop" else np.abs(v)
    return v / v.sum() if norm else v


@pytest.mark.parametrize("neg", ["drop", "abs"])
def test_ft_attnlrp_hops_0_and_1_from_attnlrp_rows(neg):
    """Relevance is linear in what is explained, so every hop vector is a weighted sum of attnlrp rows:
    hop 0 the mean of the rows of S, hop 1 the rows of T weighted by hop 0's (processed) mass on T."""
    model = tiny_model("qwen3")
    mi = make_input(T=22, gen_start=9)
    P, G = mi.prompt_positions.numel(), 13
    A = AttnLRPAttributor(forward_attn_impl=None).attribute(model, FakeTokenizer(), mi).matrix.astype(np.float64)
    sink, think = (9, 11), (0, 7)
    m = np.r_[np.ones(P), np.zeros(G)]  # observation mask on the columns: only the prompt (no CoT before T here)
    v0 = _post(A[9:12].mean(0), neg)
    r0 = FTAttnLRPAttributor(hops=0, neg_handling=neg, forward_attn_impl=None).attribute(
        model, FakeTokenizer(), mi, sink, think)
    np.testing.assert_allclose(r0.hop_vectors[0], v0, rtol=1e-4, atol=1e-6)
    assert r0.rho == pytest.approx([v0[P:P + 8].sum()], rel=1e-4)
    for t in range(G):
        if sink[0] <= t <= sink[1]:
            np.testing.assert_allclose(r0.matrix[t], v0 * m, rtol=1e-4, atol=1e-6)
        else:
            assert np.isnan(r0.matrix[t]).all()
    w = v0[P:P + 8] / v0[P:P + 8].sum()
    v1 = _post(w @ A[0:8], neg)
    r1 = FTAttnLRPAttributor(hops=1, neg_handling=neg, forward_attn_impl=None).attribute(
        model, FakeTokenizer(), mi, sink, think)
    np.testing.assert_allclose(r1.hop_vectors[1], v1, rtol=1e-4, atol=1e-6)
    rho0 = v0[P:P + 8].sum()
    np.testing.assert_allclose(r1.matrix[10], v0 * m + rho0 * v1 * m, rtol=1e-4, atol=1e-6)
    assert r1.rho[1] == pytest.approx(rho0 * v1[P:P + 8].sum(), rel=1e-4)
    # the seq view reads the prompt weights from the written rows
    assert views.seq(r1.matrix, r1.P)[:P].sum() > 0


def test_ft_attnlrp_no_norm_and_defaults():
    model = tiny_model("gpt2")
    mi = make_input(T=20, gen_start=9)
    P, G = mi.prompt_positions.numel(), 11
    A = AttnLRPAttributor(forward_attn_impl=None).attribute(model, FakeTokenizer(), mi).matrix.astype(np.float64)
    res = FTAttnLRPAttributor(hops=1, norm_mode="no_norm", forward_attn_impl=None).attribute(
        model, FakeTokenizer(), mi, (8, 10), (2, 6))
    v0 = _post(A[8:11].sum(0), norm=False)  # no_norm: the plain sum of the sink logits
    v1 = _post(v0[P + 2:P + 7] @ A[2:7], norm=False)
    m = np.r_[np.ones(P), np.ones(2), np.zeros(G - 2)]
    np.testing.assert_allclose(res.matrix[9], v0 * m + v1 * m, rtol=1e-4, atol=1e-6)  # every hop counts 1
    # no spans: S = T = the whole generation, the mask keeps the prompt only
    full = FTAttnLRPAttributor(hops=2, forward_attn_impl=None).attribute(model, FakeTokenizer(), mi)
    assert list(full.rows_written) == list(range(G)) and not full.matrix[:, P:].any()
    assert len(full.rho) == 3 and full.hop_vectors.shape == (3, P + G)


def test_parameters_are_checked():
    for bad, name in ((dict(epsilon=-1.0), "epsilon"), (dict(row_batch=0), "row_batch")):
        with pytest.raises(ValueError, match=f"^{name}=.*: (must|expected)"):
            AttnLRPAttributor(**bad)
    for bad, name in ((dict(hops=-1), "hops"), (dict(neg_handling="clip"), "neg_handling"),
                      (dict(norm_mode="l2"), "norm_mode"), (dict(epsilon=float("nan")), "epsilon")):
        with pytest.raises(ValueError, match=f"^{name}=.*: (must|expected)"):
            FTAttnLRPAttributor(**bad)


def test_unsupported_models_are_refused():
    from transformers import AutoModelForCausalLM, GPTNeoXConfig, OlmoConfig

    small = dict(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    olmo = AutoModelForCausalLM.from_config(OlmoConfig(eos_token_id=63, pad_token_id=0, **small))  # weightless norm
    with pytest.raises(UnsupportedModelError, match="OlmoLayerNorm: AttnLRP knows RMSNorm"):
        AttnLRPAttributor().attribute(olmo, FakeTokenizer(), make_input(T=12, gen_start=6))
    neox = AutoModelForCausalLM.from_config(GPTNeoXConfig(**small))
    with pytest.raises(UnsupportedModelError, match="model_type='gpt_neox'"):
        FTAttnLRPAttributor().attribute(neox, FakeTokenizer(), make_input(T=12, gen_start=6))


# --- SmolLM2 and the run stage (slow) -------------------------------------------------------------------------------

@pytest.mark.slow
def test_conservation_on_smollm2(smollm2, monkeypatch):
    mi = story_input(smollm2.tokenizer)
    model = smollm2.model
    req = [p.requires_grad for p in model.parameters()]
    try:
        ctx, lp, led = _lrp_pass(model, mi, 0.0, monkeypatch)
        report = []
        for t in (0, ctx.G // 2, ctx.G - 1):
            led.clear_grads()
            w = torch.zeros(ctx.G)
            w[t] = 1
            r_in, kept, z = float(lp.relevance(w).sum()), led.absorbed(), float(lp.logits[t].detach())
            report.append((t, z, r_in, kept["softmax"], abs(r_in + kept["bias"] + kept["softmax"] - z) / abs(z)))
    finally:
        for p, r in zip(model.parameters(), req):
            p.requires_grad_(r)
    print("\nSmolLM2 (float32): row, logit, input relevance, softmax terms, relative conservation error")
    for row in report:
        print("  %2d %8.3f %8.3f %8.3f %.1e" % row)
    assert max(r[4] for r in report) < 1e-5  # no biases in SmolLM2: input + softmax terms = logit
    assert all(0 < r[2] / r[1] < 1 for r in report)  # the input keeps a positive share of each logit


@pytest.mark.slow
def test_run_exp_writes_attnlrp_records(tmp_path):
    import json

    from ctxbench.stages.run import RESULTS, run_stage
    from helpers.configs import run_cfg

    # niah_single_1: one needle, so a short gold answer (AttnLRP runs a backward pass per generated token)
    cfg = run_cfg(tmp_path, "dataset=niah_single_1", "dataset.num_samples=1", "max_examples=1",
                  "attribution=[attnlrp,ft_attnlrp]",
                  "attribution.attnlrp.row_batch=8", "attribution.ft_attnlrp.hops=2", "mode=[recovery]",
                  "views=[seq]", "heatmaps=0", "save_traces=true")
    out = tmp_path / "job"
    summary = run_stage(cfg, out)
    recs = [json.loads(line) for line in (out / RESULTS).read_text().splitlines()]
    assert sorted(r["method"] for r in recs) == ["attnlrp", "ft_attnlrp"]
    for r in recs:
        print(f"\n{r['method']}: Recall@10% {r['recovery']['seq']:.3f}, {r['attribution_s']:.1f} s")
        assert 0 <= r["recovery"]["seq"] <= 1 and r["attribution_s"] > 0
    assert summary["ft_attnlrp"]["examples"] == 1 and summary["attnlrp"]["examples"] == 1
    assert summary["ft_attnlrp"]["recovery"]["seq"]["recall"]["n"] == 1
    assert len((out / "traces" / "ft_attnlrp" / "manifest.jsonl").read_text().splitlines()) == 1
