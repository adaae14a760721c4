"""Scoring passes whose logits would be large project their final hidden states onto the vocabulary a slice of
positions at a time (ctxbench.models.logits.Scored): every consumer's figures equal the whole-logits path's, on a
plain model and on one with Gemma's final logit soft-capping; a head it cannot reproduce keeps the logits."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from ctxbench.attribution import memory
from ctxbench.attribution.context_cite import deleted_token_logprobs
from ctxbench.attribution.perturbation import ablated_token_scores
from ctxbench.metrics.faithfulness import sequence_logprobs
from ctxbench.models import logits as logits_mod
from ctxbench.models.logits import VocabHead, predicting_logits, predicting_scores

from helpers.tiny_models import VOCAB, tiny_model

GEN_START, T = 24, 36


def _ids(seed: int = 3) -> torch.Tensor:
    return torch.randint(0, VOCAB - 1, (T,), generator=torch.Generator().manual_seed(seed))


def _capped_gemma():
    model = tiny_model("gemma3")
    model.config.final_logit_softcapping = 2.0  # small enough to change the logits a lot
    return model


MODELS = {"llama": lambda: tiny_model("llama"), "gemma3_softcapped": _capped_gemma}


def _slice_every_position(monkeypatch) -> None:
    """LOGITS_BYTES so small that every slice is one position."""
    monkeypatch.setattr(logits_mod, "LOGITS_BYTES", 1)


@pytest.fixture
def one_position_slices(monkeypatch):
    _slice_every_position(monkeypatch)


def _both(fn, monkeypatch):
    """fn() with whole logits, then with one-position slices."""
    whole = fn()
    _slice_every_position(monkeypatch)
    return whole, fn()


@pytest.mark.parametrize("name", MODELS)
def test_sliced_target_logprobs_equal_the_log_softmax_of_the_model_logits(name, one_position_slices):
    model = MODELS[name]()
    seqs = torch.stack([_ids(1), _ids(2)])
    with torch.inference_mode():
        got = predicting_scores(model, GEN_START, seqs)
        want = torch.log_softmax(predicting_logits(model, GEN_START, input_ids=seqs), -1)
    assert got.logits is None and got.hidden.shape == (2, T - GEN_START, 64)  # the sliced path was taken
    assert len(list(got.log_softmax())) == T - GEN_START  # one position a slice
    torch.testing.assert_close(got.target_logprobs(seqs[:, GEN_START:]),
                               want.gather(-1, seqs[:, GEN_START:, None])[..., 0], atol=1e-5, rtol=1e-5)


def test_the_soft_capping_is_read_from_the_config():
    assert VocabHead.of(_capped_gemma()).cap == 2.0
    assert VocabHead.of(tiny_model("llama")).cap is None


@pytest.mark.parametrize("name", MODELS)
def test_faithfulness_deletion_passes_agree(name, monkeypatch):
    model = MODELS[name]()
    seqs = torch.stack([_ids(s) for s in range(5)])
    whole, sliced = _both(lambda: sequence_logprobs(model, seqs, GEN_START, batch_size=2), monkeypatch)
    np.testing.assert_allclose(sliced, whole, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("objective", ["logprob", "kl"])
@pytest.mark.parametrize("share_prefix", [True, False])
@pytest.mark.parametrize("name", MODELS)
def test_perturbation_ablation_passes_agree(name, objective, share_prefix, monkeypatch):
    model = MODELS[name]()
    ablations = [torch.tensor(p) for p in ([20, 21], [2, 3], [10], [0, 1])]
    whole, sliced = _both(lambda: ablated_token_scores(model, _ids(), GEN_START, ablations, VOCAB - 1, 2,
                                                       objective, share_prefix=share_prefix), monkeypatch)
    for w, s in zip(whole, sliced):
        np.testing.assert_allclose(s, w, rtol=1e-5, atol=1e-5)
    if objective == "kl":
        assert (whole[1] > 0).all()  # ablating something changes each distribution


@pytest.mark.parametrize("name", MODELS)
def test_context_cite_deletion_passes_agree(name, monkeypatch):
    model = MODELS[name]()
    deletions = [torch.tensor(p) for p in ([3, 4, 5], [10], [0, 1, 2, 6])]
    whole, sliced = _both(lambda: deleted_token_logprobs(model, _ids(), GEN_START, deletions, VOCAB - 1, 2),
                          monkeypatch)
    np.testing.assert_allclose(sliced, whole, rtol=1e-5, atol=1e-5)


class ScaledLogits(torch.nn.Module):
    """A causal LM whose forward scales the logits after its head: a step VocabHead does not know."""

    def __init__(self):
        super().__init__()
        self.inner = tiny_model("llama")
        self.config = self.inner.config

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, input_ids, logits_to_keep=0, use_cache=None):
        out = self.inner(input_ids=input_ids, logits_to_keep=logits_to_keep, use_cache=use_cache)
        out.logits = out.logits * 3.0
        return out


def test_a_head_it_cannot_reproduce_keeps_the_logits(one_position_slices, caplog):
    model = ScaledLogits()
    seqs = _ids()[None]
    with torch.inference_mode(), caplog.at_level(logging.WARNING):
        got = predicting_scores(model, GEN_START, seqs)
        again = predicting_scores(model, GEN_START, seqs)
        want = predicting_logits(model, GEN_START, input_ids=seqs)
    assert got.logits is not None and again.logits is not None
    torch.testing.assert_close(got.logits, want)
    assert sum("ScaledLogits" in r.getMessage() for r in caplog.records) == 1  # said once, then remembered


def test_the_memory_estimate_counts_one_slice():
    shape = memory.ModelShape.of(tiny_model("llama"))
    big = memory.ModelShape(**{**shape.__dict__, "vocab": 262_144})
    per_position = 2 * 4 * big.vocab * 4  # two copies, batch 4, float32
    short = memory.scoring_passes(big, 1000, 50, 4) - memory.forward_transient(big, 1000, 4)
    assert short == 50 * per_position
    long = memory.scoring_passes(big, 8000, 2000, 4) - memory.forward_transient(big, 8000, 4)
    step = logits_mod.positions_per_slice(4, big.vocab)
    assert long == step * per_position <= 2 * logits_mod.LOGITS_BYTES
