"""IFR precision: the cancellation-free proximity, the float64 engine, and float32 against float64 on SmolLM2 (slow).

Relative error per element: |a - b| / |b| over the prompt columns where |b| > FLOOR * max |b| (smaller elements are
below anything a ranking or a metric can see, and their relative error is meaningless).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ctxbench.attribution import (MultiHopBothAttributor, MultiHopIFRAttributor, SpanIFRAttributor, capture,
                                  per_token_ifr, span_ifr)
from ctxbench.attribution.ifr import IFRAttributorBase, prox_l1

from helpers.tiny_models import FakeTokenizer, make_input, tiny_model

FLOOR = 1e-6


def prox_exact(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The definition, in float64: max(0, |y|_1 - |y - z|_1)."""
    z, y = z.double(), y.double()
    return (y.abs().sum(-1) - (y - z).abs().sum(-1)).clamp_min(0)


def rel_errors(a, b, floor: float = FLOOR):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    keep = np.abs(b) > floor * np.abs(b).max()
    return np.abs(a - b)[keep] / np.abs(b)[keep]


def top10(v) -> set:
    return set(np.argsort(-np.asarray(v), kind="stable")[:10].tolist())


# --- fast: the formula and the float64 engine on tiny models -------------------------------------------------------

def test_prox_equals_definition():
    g = torch.Generator().manual_seed(0)
    y = torch.randn(5, 1, 64, generator=g, dtype=torch.float64)
    y[0, 0, :8] = 0.0  # zero coordinates (sign taken as +1)
    z = torch.randn(5, 7, 64, generator=g, dtype=torch.float64) * torch.tensor([1e-3, 0.1, 1.0, 3.0, 10.0, 0.5,
                                                                                0.0]).view(1, 7, 1)
    got = prox_l1(z, y)
    torch.testing.assert_close(got, prox_exact(z, y), rtol=1e-12, atol=1e-12)
    assert (got[:, -1] == 0).all()  # a zero contribution has proximity exactly 0
    assert (prox_l1(torch.zeros(3, 64), torch.randn(3, 64, generator=g).float()) == 0).all()


def test_prox_small_contribution_float32():
    """A contribution 1e-6 the size of the sink: the float32 result keeps float32's relative precision, where the
    difference of the two norms would lose it all."""
    g = torch.Generator().manual_seed(1)
    y = torch.randn(576, generator=g) * 10
    z = torch.randn(200, 576, generator=g) * 1e-5 + 1e-5 * torch.sign(y)  # pointing mostly along y
    exact = prox_exact(z, y)
    got = prox_l1(z, y).double()
    assert (exact > 0).all()
    assert float(((got - exact).abs() / exact).max()) < 1e-5
    naive = (y.abs().sum() - (y - z).abs().sum(-1)).clamp_min(0).double()  # the float32 difference of norms
    assert float(((naive - exact).abs() / exact).median()) > 1e-2


@pytest.mark.parametrize("fam", ["llama", "qwen3", "gpt2"])
def test_float64_engine_on_tiny_models(fam):
    """A float64 model gives a float64 capture and arithmetic; float32 agrees with it to float32 rounding."""
    m32 = tiny_model(fam)
    m64 = tiny_model(fam).double()
    mi = make_input(T=24, gen_start=14)
    c32, c64 = capture(m32, mi.input_ids, 0), capture(m64, mi.input_ids, 0)
    assert c32.dtype == torch.float32 and c64.dtype == torch.float64
    rows = torch.arange(14, 24)
    assert all(lc.x_mid.dtype == lc.x_prev.dtype == torch.float64 for lc in c64.layers)
    assert all(t.dtype == torch.float64 for li in range(len(c64.layers)) for t in (*c64.kv(li), c64.queries(li, rows)))
    v64, v32 = span_ifr(c64, rows), span_ifr(c32, rows)
    assert v64.dtype == torch.float64 and v32.dtype == torch.float32
    torch.testing.assert_close(v32.double(), v64, rtol=2e-5, atol=1e-7)
    p64, p32 = per_token_ifr(c64, rows), per_token_ifr(c32, rows)
    assert p64.dtype == torch.float64
    torch.testing.assert_close(p32.double(), p64, rtol=2e-5, atol=1e-7)
    for att in (MultiHopIFRAttributor(hops=2), MultiHopBothAttributor(hops=1), SpanIFRAttributor()):
        r64 = att.attribute(m64, FakeTokenizer(), mi, (6, 8), (0, 5))
        r32 = att.attribute(m32, FakeTokenizer(), mi, (6, 8), (0, 5))
        assert r64.matrix.dtype == np.float32
        np.testing.assert_allclose(r32.matrix, r64.matrix, rtol=2e-5, atol=1e-7, equal_nan=True)


def test_float64_model_dtype():
    from ctxbench.models.causal_lm import pick_dtype

    assert pick_dtype("float64", torch.device("cpu")) == torch.float64
    assert pick_dtype("fp64", torch.device("cpu")) == torch.float64


# --- slow: SmolLM2 at about 1k and 2k tokens, float32 against float64 ---------------------------------------------

def morehopqa_input(tok, n_prompt: int, n_gen: int = 200):
    """About n_prompt tokens of MoreHopQA paragraphs (the question's own in the middle), the question, in the Table-1
    chat format; the target restates the gold paragraphs (a chain of thought of about n_gen tokens) and answers."""
    from ctxbench.datasets.morehopqa import morehopqa_sample
    from ctxbench.prompts.formats import build_model_input

    rows = json.loads(morehopqa_sample().read_text())
    own = ["".join(s) for _, s in rows[0]["context"]]
    n, paras = sum(len(tok(p).input_ids) for p in own), []
    for p in ("".join(s) for r in rows[1:] for _, s in r["context"]):
        k = len(tok(" " + p).input_ids)
        if n + k <= n_prompt:  # distractor paragraphs that fit, up to the length
            paras.append(p)
            n += k
    paras[len(paras) // 2:len(paras) // 2] = own
    prompt = " ".join(paras) + "\n" + rows[0]["question"]
    words = ("Let me think step by step. " + " ".join(p.strip() for p in own)).split()
    body = " ".join((words * (1 + n_gen // len(words)))[:n_gen * 3 // 4])
    mi = build_model_input(tok, prompt, f"{body}\nSo the answer is {rows[0]['answer']}.", "table1")
    sink = (mi.G - 21, mi.G - 2)
    return mi, sink, (0, sink[0] - 1)


@pytest.fixture(scope="module")
def smollm2_f64():
    from helpers.paths import CACHE_DIR
    from ctxbench.models import ModelConfig, load_causal_lm

    lm = load_causal_lm(ModelConfig(device="cpu", dtype="float64"), need_attentions=True, cache_dir=CACHE_DIR)
    assert lm.model.dtype == torch.float64
    return lm


@pytest.fixture(scope="module")
def runs(smollm2, smollm2_f64):
    """For each length: every method's prompt vector(s) in float32 and float64. One capture per model and input,
    shared by the methods (each attributor would otherwise run its own forward pass). Span IFR is hop 0 of
    ``ifr_multi_hop`` (the same ``span_ifr`` call over the sink span with uniform weights that ``ifr_span`` makes),
    so it is read from the hop vectors rather than computed a third time."""
    tok = smollm2.tokenizer
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        caps = {}

        def shared_capture(self, model, ctx, timings):
            key = (id(model), ctx.T)
            if key not in caps:
                caps[key] = capture(model, ctx.input_ids, ctx.gen_start, forward_attn_impl="sdpa")
            timings["capture"] = 0.0
            return caps[key]

        mp.setattr(IFRAttributorBase, "_capture", shared_capture)
        for n in (1000, 2000):
            mi, sink, think = morehopqa_input(tok, n)
            rows = np.linspace(0, mi.G - 2, 4).round().astype(int)
            res = {}
            for key, lm in (("f32", smollm2), ("f64", smollm2_f64)):
                for att in (MultiHopIFRAttributor(hops=1), MultiHopBothAttributor(hops=1)):
                    r = att.attribute(lm.model, tok, mi, sink, think)
                    res[att.name, key] = [r.matrix[int(r.rows_written[0]), :r.P]]
                    if att.name == "ifr_multi_hop":
                        res["ifr_span", key] = [r.hop_vectors[0, :r.P]]
                cap = caps[id(lm.model), int(mi.input_ids.numel())]
                M = per_token_ifr(cap, torch.as_tensor(rows) + mi.gen_start)
                res["per_token_rows", key] = list(M[:, mi.prompt_positions].double().numpy())
            caps.clear()
            out[n] = (mi, res)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("n", [1000, 2000])
@pytest.mark.parametrize("method", ["ifr_span", "per_token_rows", "ifr_multi_hop", "ifr_multi_hop_both"])
def test_float32_close_to_float64_on_smollm2(runs, n, method):
    mi, res = runs[n]
    assert abs(mi.P - n) < 0.1 * n and mi.G > 150
    for a, b in zip(res[method, "f32"], res[method, "f64"]):
        assert np.isfinite(a).all() and b.max() > 0
        rel = rel_errors(a, b)
        assert rel.size > 0.5 * mi.P
        assert np.median(rel) <= 2e-3, np.median(rel)
        assert np.quantile(rel, 0.99) <= 2e-2, np.quantile(rel, 0.99)
        assert top10(a) == top10(b)
