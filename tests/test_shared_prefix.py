"""Variants of an input run from their first change on (models/logits.py, SharedPrefix): the logits equal a full pass
on every tiny family and on the real SmolLM2, and the pass really is shorter."""

import numpy as np
import pytest
import torch

from ctxbench.attribution.perturbation import ablated_token_scores
from ctxbench.models.attention import attention_kernel
from ctxbench.models.logits import intact_scores, predicting_logits, variant_scores

from helpers.tiny_models import VOCAB, tiny_model

T, GEN_START = 40, 30


def _ids(seed=3):
    return torch.randint(1, VOCAB - 1, (T,), generator=torch.Generator().manual_seed(seed))


def _variants(ids, changes):
    """One row per list of positions, those positions set to 0."""
    seqs = ids.repeat(len(changes), 1)
    for r, pos in enumerate(changes):
        seqs[r, pos] = 0
    return seqs


def _fed_lengths(model):
    """The input lengths the model's forward receives, recorded by a pre-hook."""
    seen = []
    model.register_forward_pre_hook(lambda m, a, kw: seen.append((kw.get("input_ids") if "input_ids" in kw
                                                                   else a[0]).shape[1]), with_kwargs=True)
    return seen


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "gpt2"])
def test_variants_equal_full_passes_on_every_family(family):
    model = tiny_model(family)
    ids = _ids()
    with torch.inference_mode():
        scores, prefix = intact_scores(model, GEN_START, ids)
        assert prefix is not None
        torch.testing.assert_close(scores.logits, predicting_logits(model, GEN_START, input_ids=ids[None]))
        for changes in ([[12], [15, 3 + 20]], [[20, 21], [33]], [[35]], [[]], [[0], [9]]):
            seqs = _variants(ids, changes)
            torch.testing.assert_close(variant_scores(model, GEN_START, seqs, prefix).logits,
                                       predicting_logits(model, GEN_START, input_ids=seqs), atol=1e-5, rtol=1e-5)


def test_the_pass_starts_at_the_first_change_and_never_after_the_scored_positions():
    model = tiny_model("llama")
    ids = _ids()
    with torch.inference_mode():
        _, prefix = intact_scores(model, GEN_START, ids)
        seen = _fed_lengths(model)
        # a batch starts at its earliest change: positions 12.. of the T - 1 fed
        variant_scores(model, GEN_START, _variants(ids, [[15], [12, 30]]), prefix)
        # a change among the generated tokens still feeds every scored position (from gen_start - 1)
        variant_scores(model, GEN_START, _variants(ids, [[35]]), prefix)
        # no change at all: the same, nothing before gen_start - 1 is run again
        variant_scores(model, GEN_START, _variants(ids, [[]]), prefix)
        # a change at position 0: the whole pass
        variant_scores(model, GEN_START, _variants(ids, [[0]]), prefix)
    assert seen == [T - 1 - 12, T - GEN_START, T - GEN_START, T - 1]


def test_a_model_without_a_cache_takes_full_passes():
    inner = tiny_model("llama")

    class NoCache(torch.nn.Module):  # a forward with no cache argument
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            return inner(input_ids=input_ids, use_cache=False)

    model = NoCache()
    ids = _ids()
    with torch.inference_mode():
        scores, prefix = intact_scores(model, GEN_START, ids)
        assert prefix is None
        seqs = _variants(ids, [[12], [20]])
        torch.testing.assert_close(variant_scores(model, GEN_START, seqs, prefix).logits,
                                   predicting_logits(inner, GEN_START, input_ids=seqs))


@pytest.mark.parametrize("objective", ["logprob", "kl"])
def test_ablation_scores_with_and_without_the_prefix_agree(objective):
    model = tiny_model("qwen2")
    ids = _ids(seed=5)
    # out of order on purpose: the function sorts them by first position and must put every result back in its row
    ablations = [torch.tensor(p) for p in ([20, 21, 22], [2, 3], [31, 32], [10], [25, 5], [0, 1])]
    args = (model, ids, GEN_START, ablations, VOCAB - 1, 2, objective)
    ref_a, a = ablated_token_scores(*args, share_prefix=True)
    ref_b, b = ablated_token_scores(*args, share_prefix=False)
    np.testing.assert_allclose(ref_a, ref_b, atol=1e-6)
    np.testing.assert_allclose(a, b, atol=1e-5)
    if objective == "logprob":  # and row 3 is the ablation of position 10 alone, by a plain pass
        seq = ids.clone()
        seq[10] = VOCAB - 1
        with torch.inference_mode():
            lp = torch.log_softmax(predicting_logits(model, GEN_START, input_ids=seq[None])[0], -1)
        np.testing.assert_allclose(a[3], lp.gather(-1, ids[GEN_START:, None])[:, 0].double().numpy(), atol=1e-5)


@pytest.mark.slow
def test_smollm2_variants_are_bit_identical_to_full_passes(smollm2, smol_tokenizer):
    model = smollm2.model
    text = "The grass is green. The sky is blue. " * 30 + "Question: what colour is the sky? Answer: blue."
    ids = torch.as_tensor(smol_tokenizer(text)["input_ids"])
    gen_start = ids.numel() - 8
    with torch.inference_mode(), attention_kernel(model, "sdpa"):
        _, prefix = intact_scores(model, gen_start, ids)
        seqs = _variants(ids, [[100, 101], [130], [150, 151, 152], [160]])
        full = predicting_logits(model, gen_start, input_ids=seqs)
        part = variant_scores(model, gen_start, seqs, prefix).logits
    assert torch.equal(part, full), float((part - full).abs().max())


def test_the_prefix_is_read_only_and_serves_batches_of_any_size():
    model = tiny_model("llama")
    ids = _ids()
    with torch.inference_mode():
        _, prefix = intact_scores(model, GEN_START, ids)
        before = [(k.clone(), v.clone()) for k, v in prefix.layers]
        cache = prefix.cache(12)
        for changes in ([[12]], [[12], [13], [20]]):  # the same cache object, batch 1 then batch 3
            seqs = _variants(ids, changes)
            torch.testing.assert_close(variant_scores(model, GEN_START, seqs, prefix).logits,
                                       predicting_logits(model, GEN_START, input_ids=seqs), atol=1e-5, rtol=1e-5)
        model(input_ids=_variants(ids, [[12], [14]])[:, 12:-1], cache=cache, use_cache=True)
    assert cache.get_seq_length() == 12  # nothing was appended: the layers keep the prefix only, at batch 1
    assert all(lay.keys.shape[0] == 1 for lay in cache.layers)
    for (k, v), (k0, v0) in zip(prefix.layers, before):
        assert torch.equal(k, k0) and torch.equal(v, v0)
