"""IFR core on tiny random Llama / Qwen3 / GPT-2: brute-force float64 reference, exact decomposition, recompute vs
stored attention, span / multi-hop identities, stop-token rows."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from ctxbench.attribution import capture, per_token_ifr, reconstruct_x_mid, span_ifr
from ctxbench.attribution import multi_hop as mh
from ctxbench.attribution.ifr import IFRConfig

from helpers.tiny_models import FakeTokenizer, family_members, make, make_input, tiny_model

FAMILIES = family_members()  # one tiny decoder per member of every family (attribution.families.FAMILIES)
EAGER = dict(forward_attn_impl=None)  # capture with the loaded eager kernel, like capture() below


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request):
    return request.param, tiny_model(request.param)


# --- brute force, straight from the formula of docs/attribution.md ("Per-token IFR"), float64 -------------------------

def _norm64(mod, x, family):
    w = mod.weight.detach().double()
    if family == "gpt2":
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + mod.eps) * w + mod.bias.detach().double()
    eps = getattr(mod, "variance_epsilon", None) or mod.eps
    gain = 1.0 + w if family == "gemma3" else w  # Gemma's RMSNorm multiplies by (1 + w)
    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps) * gain


def _layer_parts64(model, family, li):
    """(norm module, W_V as (d, H, dh) + bias (H, dh) expanded to query heads, W_O blocks (H, dh, d), b_O)."""
    if family == "gpt2":
        blk = model.transformer.h[li]
        a = blk.attn
        d, H, dh = a.embed_dim, a.num_heads, a.head_dim
        W = a.c_attn.weight.detach().double()
        b = a.c_attn.bias.detach().double()
        wv, bv = W[:, 2 * d:].reshape(d, H, dh), b[2 * d:].reshape(H, dh)
        wo = a.c_proj.weight.detach().double().reshape(H, dh, d)
        return blk.ln_1, blk.ln_2, wv, bv, wo, a.c_proj.bias.detach().double()
    blk = model.model.layers[li]
    a = blk.self_attn
    dh = a.head_dim
    H = a.q_proj.out_features // dh
    Hkv = a.k_proj.out_features // dh
    d = a.o_proj.out_features
    wv = a.v_proj.weight.detach().double().T.reshape(d, Hkv, dh)
    bv = (a.v_proj.bias.detach().double() if a.v_proj.bias is not None else torch.zeros(Hkv * dh,
                                                                                         dtype=torch.float64))
    bv = bv.reshape(Hkv, dh)
    grp = H // Hkv
    wv, bv = wv[:, [h // grp for h in range(H)]], bv[[h // grp for h in range(H)]]
    wo = torch.stack([a.o_proj.weight.detach().double()[:, h * dh:(h + 1) * dh].T for h in range(H)])
    bo = a.o_proj.bias.detach().double() if a.o_proj.bias is not None else torch.zeros(d, dtype=torch.float64)
    if family == "gemma3":  # x_mid is the input of the norm before the feed-forward block (sandwich norms)
        return blk.input_layernorm, blk.pre_feedforward_layernorm, wv, bv, wo, bo
    return blk.input_layernorm, blk.post_attention_layernorm, wv, bv, wo, bo


def _hooked_states(model, family, ids):
    """x_prev (hidden state entering each layer), x_mid (input of the post-attention norm), eager attentions."""
    L = model.config.num_hidden_layers
    mids = [None] * L
    hs = []
    for li in range(L):
        *_, = _layer_parts64(model, family, li)
        mid_mod = _layer_parts64(model, family, li)[1]
        hs.append(mid_mod.register_forward_pre_hook(
            lambda m, a, li=li: mids.__setitem__(li, a[0][0].detach().double())))
    with torch.no_grad():
        out = model(ids[None], output_hidden_states=True, output_attentions=True)
    for h in hs:
        h.remove()
    x_prev = [out.hidden_states[li][0].double() for li in range(L)]
    attn = [out.attentions[li][0].double() for li in range(L)]
    return x_prev, mids, attn


def _prox(z, y):
    return max(0.0, float(y.abs().sum() - (y - z).abs().sum()))


def brute_force_ifr(model, family, ids, sinks):
    T = ids.numel()
    x_prev, x_mid, attn = _hooked_states(model, family, ids)
    out = np.zeros((len(sinks), T))
    for li in range(model.config.num_hidden_layers):
        ln1, _, wv, bv, wo, _ = _layer_parts64(model, family, li)
        xn = _norm64(ln1, x_prev[li], family)
        H = wo.shape[0]
        f = [[(xn[j] @ wv[:, h] + bv[h]) @ wo[h] for h in range(H)] for j in range(T)]
        for r, i in enumerate(sinks):
            scale, gain = 1.0, 1.0
            if family == "gemma3":  # x_mid_i = x_prev_i + g * o_i / rms(o_i), o_i the attention output
                post = model.model.layers[li].post_attention_layernorm
                o = sum(attn[li][h, i, j] * f[j][h] for j in range(i + 1) for h in range(H))
                scale = 1.0 / float(torch.sqrt((o ** 2).mean() + post.eps))
                gain = 1.0 + post.weight.detach().double()
            num = np.zeros(T)
            for j in range(i + 1):
                for h in range(H):
                    num[j] += _prox(attn[li][h, i, j] * scale * gain * f[j][h], x_mid[li][i])
            den = num.sum() + _prox(x_prev[li][i], x_mid[li][i])
            out[r] += num / den
    return out


def test_per_token_ifr_matches_brute_force(fam):
    family, model = fam
    mi = make_input()
    sinks = list(range(mi.gen_start, mi.input_ids.numel()))
    ref = brute_force_ifr(model, family, mi.input_ids, sinks)
    cap = capture(model, mi.input_ids, mi.gen_start)
    got = per_token_ifr(cap, sinks, IFRConfig(sink_chunk=2, chunk_elems=700)).numpy()  # tiny chunks: exercise them
    # fp32 against fp64: a proximity is a difference of two L1 norms, so its rounding error scales with |x_mid|_1
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=5e-5)
    res = make("ifr_all_positions", **EAGER).attribute(model, FakeTokenizer(), mi, None, None)
    cols = torch.cat([mi.prompt_positions, torch.arange(mi.gen_start, mi.input_ids.numel())]).numpy()
    np.testing.assert_allclose(res.matrix, ref[:, cols], rtol=1e-4, atol=5e-5)


def test_decomposition_is_exact(fam):
    family, model = fam
    mi = make_input()
    T = mi.input_ids.numel()
    for store in (False, True):
        cap = capture(model, mi.input_ids, 0, store_attention=store)
        for li, lc in enumerate(cap.layers):
            rec = reconstruct_x_mid(cap, li, torch.arange(T))
            rel = (rec - lc.x_mid).norm(dim=-1) / lc.x_mid.norm(dim=-1)
            assert float(rel.max()) < 1e-4


def test_recomputed_attention_equals_stored(fam):
    family, model = fam
    mi = make_input()
    a = capture(model, mi.input_ids, mi.gen_start, store_attention=True)
    b = capture(model, mi.input_ids, mi.gen_start, store_attention=False)
    rows = torch.arange(mi.gen_start, mi.input_ids.numel())
    from ctxbench.attribution.ifr import LayerView
    for li in range(len(a.layers)):
        torch.testing.assert_close(LayerView(b, li, IFRConfig()).attn_rows(rows, scaled=False), a.layers[li].attn,
                                   atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(per_token_ifr(a, rows), per_token_ifr(b, rows), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(span_ifr(a, rows), span_ifr(b, rows), atol=1e-5, rtol=1e-5)
    for method in ("ifr_multi_hop", "ifr_multi_hop_both"):
        ra = make(method, recompute_attention=False).attribute(model, FakeTokenizer(), mi, (3, 4), (0, 2))
        rb = make(method, recompute_attention=True, forward_attn_impl=None).attribute(model, FakeTokenizer(), mi,
                                                                                      (3, 4), (0, 2))
        np.testing.assert_allclose(ra.matrix, rb.matrix, atol=1e-5, equal_nan=True)


def test_span_ifr_identities(fam):
    family, model = fam
    mi = make_input()
    cap = capture(model, mi.input_ids, mi.gen_start)
    rows = list(range(mi.gen_start, mi.input_ids.numel()))
    pt = per_token_ifr(cap, rows)
    for r, i in enumerate(rows):  # a one-position span is per-token IFR there
        torch.testing.assert_close(span_ifr(cap, [i]), pt[r], atol=1e-6, rtol=1e-5)
    # weighted span, straight from the formula ("Span IFR") using the capture's own pieces
    w = torch.tensor([0.5, 0.0, 2.0, 1.0, 0.5])
    wn = w / w.sum()
    got = span_ifr(cap, rows, w)
    from ctxbench.attribution.ifr import LayerView
    ref = torch.zeros(cap.T, dtype=torch.float64)
    rt = torch.tensor(rows)
    for li in range(len(cap.layers)):
        lv = LayerView(cap, li, IFRConfig())
        alpha = lv.attn_rows(rt).double()
        abar = torch.einsum("r,hrn->hn", wn.double(), alpha)
        f = lv.head_outputs(0, cap.T).double()
        xs = wn.double() @ lv.x_mid(rt).double()
        rs = wn.double() @ lv.x_prev(rt).double()
        prox = (xs.abs().sum() - (abar[..., None] * f - xs).abs().sum(-1)).clamp_min(0)
        den = prox.sum() + (xs.abs().sum() - (rs - xs).abs().sum()).clamp_min(0)
        ref += prox.sum(0) / den
    torch.testing.assert_close(got.double(), ref, atol=1e-5, rtol=1e-4)
    # sink chunks of 2 rows (each formed over the sources its own rows see), rows in either order: the same vector
    for order, wo in ((rows, w), (rows[::-1], w.flip(0))):
        torch.testing.assert_close(span_ifr(cap, order, wo, IFRConfig(sink_chunk=2)).double(), ref,
                                   atol=1e-5, rtol=1e-4)
    # the weights are normalised: scaling them changes nothing
    torch.testing.assert_close(span_ifr(cap, rows, 3 * w), got)


def test_tau_zeroes_small_proximities():
    model = tiny_model("llama")
    mi = make_input()
    cap = capture(model, mi.input_ids, mi.gen_start)
    rows = list(range(mi.gen_start, mi.input_ids.numel()))
    base = per_token_ifr(cap, rows)
    hi = per_token_ifr(cap, rows, IFRConfig(tau=1e9))
    assert float(base.sum()) > 0 and float(hi.abs().sum()) == 0


def test_multi_hop_zero_hops_is_masked_span_ifr(fam):
    family, model = fam
    mi = make_input()
    sink, think = (3, 4), (0, 2)
    res = make("ifr_multi_hop", hops=0, **EAGER).attribute(model, FakeTokenizer(), mi, sink, think)
    cap = capture(model, mi.input_ids, mi.gen_start)
    v0 = span_ifr(cap, range(mi.gen_start + 3, mi.gen_start + 5))
    m = torch.ones(cap.T)
    m[mi.gen_start:] = 0  # T, S and everything after T: the whole generation here
    cols = torch.cat([mi.prompt_positions, torch.arange(mi.gen_start, cap.T)])
    expect = (v0 * m)[cols].numpy()
    for t in range(mi.G):
        if sink[0] <= t <= sink[1]:
            np.testing.assert_allclose(res.matrix[t], expect, rtol=1e-6, atol=1e-7)
        else:
            assert np.isnan(res.matrix[t]).all()
    assert res.hop_vectors.shape == (1, mi.P + mi.G) and len(res.rho) == 1


class _StubCap:
    """Stands in for a capture: span_ifr is replaced by a table lookup keyed on (rows, weights)."""

    class _L:
        h = torch.zeros(1)

    layers = [_L()]


def test_one_hop_against_hand_example(monkeypatch):
    # T = 6 positions: prompt 0..2, CoT 3..4, answer 5.
    v0 = torch.tensor([0.2, 0.1, 0.0, 0.3, 0.1, 0.5])  # hop 0 over S = [5]
    v1 = torch.tensor([0.4, 0.0, 0.2, 0.1, 0.3, 0.0])  # hop 1 over T = [3, 4] weighted by v0[T]
    calls = []

    def fake_span(cap, rows, weights, cfg):
        rows = list(torch.as_tensor(rows).tolist())
        calls.append((rows, None if weights is None else weights.tolist()))
        return v0.clone() if rows == [5] else v1.clone()

    monkeypatch.setattr(mh, "span_ifr", fake_span)
    m = torch.tensor([1.0, 1, 1, 0, 0, 0])
    hr = mh.hop_chain(_StubCap(), IFRConfig(), torch.tensor([5]), None, torch.tensor([3, 4]), m, hops=1)
    rho0 = 0.4 / 1.2
    rho1 = rho0 * (0.4 / 1.0)
    expect = torch.tensor([0.2, 0.1, 0.0, 0, 0, 0]) + rho0 * torch.tensor([0.4, 0.0, 0.2, 0, 0, 0])
    torch.testing.assert_close(hr.observed, expect)
    assert hr.rho == pytest.approx([rho0, rho1])
    assert calls[1] == ([3, 4], pytest.approx([0.3, 0.1]))  # hop 1 weighted by v0's CoT mass
    # no CoT mass: later hops are zero vectors, rho 0
    v0[3:5] = 0
    hr = mh.hop_chain(_StubCap(), IFRConfig(), torch.tensor([5]), None, torch.tensor([3, 4]), m, hops=2)
    assert hr.rho == [0.0, 0.0, 0.0] and float(hr.hop_vectors[2].abs().sum()) == 0


def test_multi_hop_both_rows_and_stop_tokens():
    model = tiny_model("llama")
    # generated: [w, ",", w, ".", w, EOS]; prompt has a "," and a whitespace token
    ids = torch.tensor([10, 11, 12, 3, 13, 5, 14, 15, 20, 3, 21, 4, 22, 63])
    mi = make_input(ids=ids, gen_start=8)
    tok = FakeTokenizer()
    res = make("ifr_multi_hop_both", hops=2, **EAGER).attribute(model, tok, mi, (2, 4), (0, 1))
    written = [t for t in range(mi.G) if not np.isnan(res.matrix[t]).all()]
    assert written == [2, 4]  # non-stop tokens of S; the stop token 3 and EOS are never rows
    stop_cols = np.where(np.concatenate([res.prompt_stop_mask, res.gen_stop_mask]))[0]
    assert res.prompt_stop_mask.tolist() == [False, True, False, True, False]
    assert (res.matrix[2, stop_cols] == 0).all() and (res.hop_vectors[:, stop_cols] == 0).all()
    assert res.hop_vectors.shape == (3, mi.P + mi.G) and len(res.rho) == 3
    # hop0 switch: over S only vs over all_gen differ; defaults reproduce all_gen
    r_sink = make("ifr_multi_hop_both", hops=0, hop0="sink", **EAGER).attribute(model, tok, mi, (2, 4), (0, 1))
    r_all = make("ifr_multi_hop_both", hops=0, **EAGER).attribute(model, tok, mi, (2, 4), (0, 1))
    cap = capture(model, mi.input_ids, mi.gen_start)
    keep = torch.ones(cap.T)
    keep[[3, 5, 9, 11, 13]] = 0  # prompt "," and "  ", generated "," "." and the EOS itself (a stop by weight)
    w_all = keep[8:13]
    v_all = span_ifr(cap, range(8, 13), w_all)
    cols = torch.cat([mi.prompt_positions, torch.arange(8, cap.T)])
    m = torch.ones(cap.T)
    m[8:] = 0
    kv = keep.clone()
    kv[13] = 1  # EOS is excluded from the sinks, not zeroed as a source
    np.testing.assert_allclose(r_all.hop_vectors[0], (v_all * kv)[cols].numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(r_all.matrix[2], (v_all * kv * m)[cols].numpy(), rtol=1e-5, atol=1e-7)
    v_sink = span_ifr(cap, [10, 12])
    np.testing.assert_allclose(r_sink.hop_vectors[0], (v_sink * kv)[cols].numpy(), rtol=1e-5, atol=1e-7)


def test_sdpa_capture_close_to_eager(fam):
    family, model = fam
    mi = make_input()
    a = make("ifr_multi_hop", **EAGER).attribute(model, FakeTokenizer(), mi, (3, 4), (0, 2))
    b = make("ifr_multi_hop").attribute(model, FakeTokenizer(), mi, (3, 4), (0, 2))
    np.testing.assert_allclose(a.matrix, b.matrix, atol=1e-4, equal_nan=True)
    assert model.config._attn_implementation == "eager"


def test_span_and_all_positions_rows():
    model = tiny_model("gpt2")
    mi = make_input()
    res = make("ifr_span").attribute(model, FakeTokenizer(), mi, (1, 3), None)
    assert np.isnan(res.matrix[0]).all() and np.isnan(res.matrix[4]).all()
    assert np.allclose(res.matrix[1], res.matrix[3])
    assert res.matrix.dtype == np.float32 and res.matrix.shape == (mi.G, mi.P + mi.G)
    with pytest.raises(ValueError):
        make("ifr_span").attribute(model, FakeTokenizer(), mi, (3, 9), None)



def test_parameters_checked_when_built():
    """A bad setting fails when the method is built, before any model work; unknown keywords are refused."""
    from ctxbench.attribution import AttentionAttributor, MultiHopBothAttributor, MultiHopIFRAttributor

    with pytest.raises(ValueError, match="hop0='first'"):
        MultiHopBothAttributor(hop0="first")
    with pytest.raises(ValueError, match=r"^hops=-1: must be >= 0$"):
        MultiHopIFRAttributor(hops=-1)
    with pytest.raises(ValueError, match="ig_steps"):
        AttentionAttributor(times_ig=True, ig_steps=1)
    with pytest.raises(TypeError):
        MultiHopIFRAttributor(hopz=2)
    # the chunking fields only bound memory: neutral, so not part of the settings that identify results
    assert MultiHopBothAttributor(hops=3, sink_chunk=8).settings() == {
        "_target_": "ctxbench.attribution.multi_hop.MultiHopBothAttributor", "tau": 0.0, "recompute_attention": True,
        "forward_attn_impl": "sdpa", "hops": 3, "hop0": "all_gen"}


def test_recorded_attention_inputs_equal_projections(fam):
    """The sdpa capture records the queries/keys/values the kernel got; they equal the adapter's projections from the
    captured inputs (the eager path), and the attention registry is left as it was. The recorded capture keeps no
    attention inputs (they would cost T x d per layer)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    family, model = fam
    mi = make_input()
    cap = capture(model, mi.input_ids, mi.gen_start, forward_attn_impl="sdpa")
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is sdpa_attention_forward
    assert "sdpa" not in ALL_ATTENTION_FUNCTIONS._local_mapping
    ref = capture(model, mi.input_ids, mi.gen_start, forward_attn_impl=None)  # eager: nothing recorded
    rows = torch.arange(mi.gen_start, mi.input_ids.numel())
    for li, lc in enumerate(cap.layers):
        assert lc.q is not None and lc.kv is not None and ref.layers[li].kv is None and ref.layers[li].q is None
        assert lc.h is None and ref.layers[li].h is not None
        for got, want in zip(cap.kv(li), ref.kv(li)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(cap.queries(li, rows), ref.queries(li, rows), atol=1e-5, rtol=1e-5)


def test_sdpa_capture_keeps_the_kernels_log_sum_exp(fam):
    """The sdpa capture runs the CPU flash kernel itself and keeps each generated row's log-sum-exp: it equals the one
    formed from the recorded queries and keys (float64), the residual stream is bit-identical to the registered sdpa
    kernel's, and attention rows and IFR from it equal those from the stored eager probabilities."""
    from ctxbench.attribution.ifr import LayerView

    family, model = fam
    mi = make_input()
    cap = capture(model, mi.input_ids, mi.gen_start, forward_attn_impl="sdpa")
    T, rows = mi.input_ids.numel(), torch.arange(mi.gen_start, mi.input_ids.numel())
    for li, lc in enumerate(cap.layers):
        if cap.adapter.sliding_window(li):  # not a plain causal call: the registered kernel runs, no lse
            assert lc.lse is None and lc.q is not None
            continue
        assert lc.lse is not None and lc.lse.shape == (cap.adapter.n_heads, rows.numel())
        q = cap.queries(li, rows).double() * cap.adapter.scaling(li)
        k = cap.kv(li)[0].double().repeat_interleave(cap.adapter.group, dim=0)
        logits = (q @ k.transpose(1, 2)).masked_fill(torch.arange(T)[None, :] > rows[:, None], float("-inf"))
        torch.testing.assert_close(lc.lse.double(), torch.logsumexp(logits, -1), atol=1e-5, rtol=1e-6)
    with pytest.MonkeyPatch.context() as mp:  # the same pass through transformers' registered sdpa kernel
        mp.setattr(importlib.import_module("ctxbench.attribution.capture"), "causal_attention_with_lse",
                   lambda *a, **k: None)
        via_sdpa = capture(model, mi.input_ids, mi.gen_start, forward_attn_impl="sdpa")
    assert all(lc.lse is None for lc in via_sdpa.layers)
    for a, b in zip(cap.layers, via_sdpa.layers):
        assert torch.equal(a.x_mid, b.x_mid) and torch.equal(a.x_prev, b.x_prev)
    stored = capture(model, mi.input_ids, mi.gen_start, store_attention=True)
    for li in range(len(cap.layers)):
        torch.testing.assert_close(LayerView(cap, li, IFRConfig()).attn_rows(rows, scaled=False),
                                   stored.layers[li].attn, atol=1e-6, rtol=1e-5)
    w = torch.rand(rows.numel(), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(span_ifr(cap, rows, w, IFRConfig(sink_chunk=2)), span_ifr(stored, rows, w),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(per_token_ifr(cap, rows), per_token_ifr(stored, rows), atol=1e-5, rtol=1e-5)


def test_log_sum_exp_kernel_only_for_plain_causal_calls():
    """Masks, dropout, sliding windows, soft-capping and decoding steps go to the registered kernel (None here)."""
    from ctxbench.attribution.capture import causal_attention_with_lse

    mod = torch.nn.Module()
    q, k = torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8)
    out, lse = causal_attention_with_lse(mod, q, k, k, None, scaling=0.3)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True, scale=0.3, enable_gqa=True)
    assert torch.equal(out, ref.transpose(1, 2).contiguous()) and lse.shape == (1, 4, 6)
    mask = torch.zeros(1, 1, 6, 6)
    for args, kwargs in [((mask,), {"scaling": 0.3}), ((None,), {"scaling": 0.3, "dropout": 0.1}),
                         ((None,), {"scaling": 0.3, "sliding_window": 4}), ((None,), {"scaling": 0.3, "softcap": 5.0}),
                         ((None,), {}), ((None,), {"scaling": 0.3, "is_causal": False})]:
        assert causal_attention_with_lse(mod, q, k, k, *args, **kwargs) is None, kwargs
    assert causal_attention_with_lse(mod, q[:, :, -1:], k, k, None, scaling=0.3) is None  # one query: a decoding step


@pytest.mark.parametrize("scale", [1e-3, 3e-2, 1.0, 30.0])
def test_overshoot_screen_equals_full_computation(fam, scale):
    """The bounded overshoot term equals the one formed from every head output and coordinate, for weights from
    nearly all pairs screened out (small) to none (large), including sinks with zero coordinates."""
    from ctxbench.attribution.ifr import LayerView, SinkSigns

    family, model = fam
    mi = make_input()
    cap = capture(model, mi.input_ids, mi.gen_start, forward_attn_impl="sdpa")
    g = torch.Generator().manual_seed(3)
    for li in range(len(cap.layers)):
        lv = LayerView(cap, li, IFRConfig(chunk_elems=50))  # tiny source chunks: exercise them
        a = scale * torch.rand(cap.adapter.n_heads, cap.T, generator=g)
        y = cap.layers[li].x_mid[-1].clone()
        y[::7] = 0.0
        sg = SinkSigns(y)
        full = ((a[..., None] * lv.head_outputs(0, cap.T) - y).clamp(sg.lo, sg.hi) * sg.s).sum(-1)
        got = lv.overshoot(a, y, sg)
        torch.testing.assert_close(got, full, atol=1e-6, rtol=1e-5)
        assert bool((got[full == 0] == 0).all())


def test_each_family_reads_its_own_tiny_members_and_the_refusal_names_them_all():
    """``FAMILIES`` is the one list: every family has tiny members, each read by that family's adapter (not by a
    catch-all one), and the refusal of a decoder no family reads names every family's label."""
    from transformers import AutoModelForCausalLM, GPTNeoXConfig

    from ctxbench.attribution.families import FAMILIES, UnsupportedModelError, adapter_for

    for family in FAMILIES:
        members = family.tiny_configs(64)
        assert members, family
        for name in members:
            assert type(adapter_for(tiny_model(name))) is family, name
    neox = AutoModelForCausalLM.from_config(GPTNeoXConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                                          num_attention_heads=2, intermediate_size=64))
    with pytest.raises(UnsupportedModelError) as err:
        adapter_for(neox)
    assert str(err.value) == ("model_type='gpt_neox': IFR supports Llama/Mistral/Qwen2/Qwen3-like decoders, Gemma 3 "
                              "and GPT-2")
