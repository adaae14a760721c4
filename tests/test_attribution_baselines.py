"""Baselines on a tiny random Llama and Gemma 3: attention, input x gradient, integrated gradients, random."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ctxbench.attribution.base import causal_column_mask

from helpers.tiny_models import FakeTokenizer, make, make_input, tiny_model


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def model(request):
    return tiny_model(request.param)


def _logp_rows(model, embeds, mi):
    rows = torch.arange(mi.gen_start - 1, mi.input_ids.numel() - 1)
    lp = torch.log_softmax(model(inputs_embeds=embeds).logits[0, rows].float(), -1)
    return lp.gather(-1, mi.input_ids[mi.gen_start:, None])[:, 0]


def test_attention_is_last_layer_head_mean(model):
    mi = make_input()
    res = make("attention").attribute(model, FakeTokenizer(), mi)
    with torch.no_grad():
        att = model(mi.input_ids[None], output_attentions=True).attentions[-1][0].mean(0)
    cols = torch.cat([mi.prompt_positions, torch.arange(mi.gen_start, mi.input_ids.numel())])
    ref = att[mi.gen_start - 1:-1][:, cols].numpy() * causal_column_mask(mi.P, mi.G)
    np.testing.assert_allclose(res.matrix, ref, atol=1e-6)


def test_integrated_gradients_completeness(model):
    mi = make_input(template=0)  # every position before the generation is a prompt column
    mi.prompt_positions = torch.arange(0, mi.gen_start)
    res = make("integrated_gradients", ig_steps=64, ig_batch=8).attribute(model, FakeTokenizer(), mi)
    emb = model.get_input_embeddings()
    with torch.no_grad():
        x = emb(mi.input_ids[None])
        x0 = emb(torch.full_like(mi.input_ids[None], FakeTokenizer.eos_token_id))
        gap = (_logp_rows(model, x, mi) - _logp_rows(model, x0, mi)).numpy()
    # columns hold every position that can matter (the causal past), so the rows sum to the output gap
    np.testing.assert_allclose(res.matrix.sum(1), gap, rtol=0.03, atol=2e-3)
    assert all(p.requires_grad for p in model.parameters())  # parameters restored


def test_input_x_gradient_matches_autograd(model):
    mi = make_input()
    res = make("input_x_gradient").attribute(model, FakeTokenizer(), mi)
    x = model.get_input_embeddings()(mi.input_ids[None]).detach().requires_grad_(True)
    t = 2
    (g,) = torch.autograd.grad(_logp_rows(model, x, mi)[t], x)
    full = (g * x).sum(-1)[0].detach()
    cols = torch.cat([mi.prompt_positions, torch.arange(mi.gen_start, mi.input_ids.numel())])
    np.testing.assert_allclose(res.matrix[t], (full[cols].numpy() * causal_column_mask(mi.P, mi.G)[t]), atol=1e-5)


def test_random_is_seeded_and_causal(model):
    mi = make_input()
    a = make("random", seed=3).attribute(model, FakeTokenizer(), mi).matrix
    b = make("random", seed=3).attribute(model, FakeTokenizer(), mi).matrix
    c = make("random", seed=4).attribute(model, FakeTokenizer(), mi).matrix
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert (a[~causal_column_mask(mi.P, mi.G)] == 0).all() and (a[causal_column_mask(mi.P, mi.G)] > 0).all()


class OutOfMemoryAbove(torch.nn.Module):
    """The tiny model behind a forward that fails like a full GPU for batches above ``limit`` (sizes logged)."""

    def __init__(self, inner, limit: int):
        super().__init__()
        self.inner, self.limit, self.sizes = inner, limit, []
        self.config = inner.config

    def get_input_embeddings(self):
        return self.inner.get_input_embeddings()

    def forward(self, inputs_embeds, **kw):
        self.sizes.append(inputs_embeds.shape[0])
        if inputs_embeds.shape[0] > self.limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (fake)")
        return self.inner(inputs_embeds=inputs_embeds, **kw)


def test_integrated_gradients_halve_their_batch_on_out_of_memory(model):
    mi = make_input()
    want = make("integrated_gradients", ig_steps=10, ig_batch=10).attribute(model, FakeTokenizer(), mi).matrix
    small = OutOfMemoryAbove(model, limit=3)
    got = make("integrated_gradients", ig_steps=10, ig_batch=8).attribute(small, FakeTokenizer(), mi).matrix
    assert small.sizes == [8, 4, 2, 2, 2, 2, 2]  # 8 and 4 fail; the 10 points then go 2 at a time, each once
    np.testing.assert_allclose(got, want, atol=1e-5)


class StopsAfter(OutOfMemoryAbove):
    """The tiny model behind a forward that stops the run (as a killed lane) on its call number ``stop`` (from 1)."""

    def __init__(self, inner, stop: int):
        super().__init__(inner, limit=10 ** 6)
        self.stop = stop

    def forward(self, inputs_embeds, **kw):
        if len(self.sizes) + 1 == self.stop:
            raise KeyboardInterrupt
        return super().forward(inputs_embeds, **kw)


def test_integrated_gradients_resume_mid_example_from_their_partial_sum(model, tmp_path):
    mi = make_input()
    want = make("integrated_gradients", ig_steps=10, ig_batch=3).attribute(model, FakeTokenizer(), mi).matrix
    ig = make("integrated_gradients", ig_steps=10, ig_batch=3, partial_dir=str(tmp_path / "partial"))
    stopped = StopsAfter(model, stop=3)  # batches [0, 3) and [3, 6) done, stopped in the third
    with pytest.raises(KeyboardInterrupt):
        ig.attribute(stopped, FakeTokenizer(), mi)
    saved = list((tmp_path / "partial").iterdir())
    rows_done = torch.load(saved[0])["rows_done"]  # (rows, points): every row has summed points 0-5
    assert len(saved) == 1 and rows_done[:, :6].all() and not rows_done[:, 6:].any()
    # another input (one token changed) does not take that sum
    other = make_input()
    other.input_ids = other.input_ids.clone()
    other.input_ids[1] = (int(other.input_ids[1]) + 1) % model.config.vocab_size
    assert ig.attribute(model, FakeTokenizer(), other).matrix.shape == want.shape
    assert len(list((tmp_path / "partial").iterdir())) == 1  # its own file made and removed, the stopped one kept
    # resumed with 4 points a batch: [4, 8) holds two points summed already, only 6 and 7 run
    resumed = StopsAfter(model, stop=0)
    ig4 = make("integrated_gradients", ig_steps=10, ig_batch=4, partial_dir=str(tmp_path / "partial"))
    got = ig4.attribute(resumed, FakeTokenizer(), mi).matrix
    assert resumed.sizes == [2, 2]  # only the points not summed: 6, 7 and 8, 9
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert not list((tmp_path / "partial").iterdir())  # removed once the example is done
    # a setting that changes the result is not neutral; partial_dir is (results made with or without it compare)
    from ctxbench.core.part import settings_of

    assert "partial_dir" not in settings_of(ig)


def test_integrated_gradients_stopped_mid_batch_keep_the_rows_summed(model, tmp_path, monkeypatch):
    """A SIGTERM arrives between two rows' backward passes of one batch (a batch of a chain-of-thought example takes
    minutes on a CPU): the rows summed so far are kept, and the rerun sums only the rest, to the same matrix."""
    from ctxbench.attribution import baselines

    mi = make_input()
    grad, calls = torch.autograd.grad, []
    monkeypatch.setattr(baselines.torch.autograd, "grad", lambda *a, **k: calls.append(1) or grad(*a, **k))
    want = make("integrated_gradients", ig_steps=6, ig_batch=3).attribute(model, FakeTokenizer(), mi).matrix
    rows = len(calls) // 2  # a backward pass per explained row and batch
    assert rows >= 3 and len(calls) == 2 * rows
    calls.clear()

    def stops(*args, **kwargs):  # in the third row's backward pass of the second batch: two rows of it summed
        calls.append(1)
        if len(calls) == rows + 3:
            raise KeyboardInterrupt
        return grad(*args, **kwargs)

    monkeypatch.setattr(baselines.torch.autograd, "grad", stops)
    ig = make("integrated_gradients", ig_steps=6, ig_batch=3, partial_dir=str(tmp_path / "partial"))
    with pytest.raises(KeyboardInterrupt):
        ig.attribute(model, FakeTokenizer(), mi)
    (saved,) = (tmp_path / "partial").iterdir()
    rows_done = torch.load(saved)["rows_done"]
    assert rows_done[:, :3].all() and rows_done[:2, 3:].all() and not rows_done[2:, 3:].any()
    counted = []
    monkeypatch.setattr(baselines.torch.autograd, "grad", lambda *a, **k: counted.append(1) or grad(*a, **k))
    got = ig.attribute(model, FakeTokenizer(), mi).matrix
    assert len(counted) == rows - 2  # only the rows of the second batch not summed when it stopped
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert not list((tmp_path / "partial").iterdir())


def test_the_cost_ledger_counts_the_passes_where_they_run(model, monkeypatch):
    """attribution.cost.counting_passes, checked against counts taken independently: integrated gradients with 6
    points in batches of 3 run 2 forward calls of 3 sequences and one backward pass per explained row and batch
    (torch.autograd.grad calls counted by hand); input x gradient one forward and a backward per row; the random
    control none."""
    from ctxbench.attribution import baselines
    from ctxbench.attribution.cost import counting_passes

    mi = make_input()
    grad, calls = torch.autograd.grad, []
    monkeypatch.setattr(baselines.torch.autograd, "grad", lambda *a, **k: calls.append(1) or grad(*a, **k))
    with counting_passes(model) as ig:
        make("integrated_gradients", ig_steps=6, ig_batch=3).attribute(model, FakeTokenizer(), mi)
    assert (ig.forward_calls, ig.forward_sequences, ig.backward) == (2, 6, len(calls))
    rows = len(calls) // 2
    calls.clear()
    with counting_passes(model) as ixg:
        make("input_x_gradient").attribute(model, FakeTokenizer(), mi)
    assert (ixg.forward_calls, ixg.forward_sequences, ixg.backward) == (1, 1, rows) and len(calls) == rows
    with counting_passes(model) as rnd:
        make("random").attribute(model, FakeTokenizer(), mi)
    assert (rnd.forward_calls, rnd.backward) == (0, 0)
    assert ig.peak_kind == "rss_growth" and ig.peak_mib >= 0
    # after the block nothing is counted any more (the hooks are gone)
    model(input_ids=mi.input_ids.view(1, -1))
    assert rnd.forward_calls == 0
