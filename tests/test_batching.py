"""Batches halved on CUDA out-of-memory (ctxbench.utils.batching), tested on CPU with fakes that raise the error above a
size: every item is processed exactly once, the size that worked is kept, the forward passes reported are the ones
the fake saw complete, and deletion and ablation scores are unchanged."""

import numpy as np
import pytest
import torch

from ctxbench.utils.batching import BatchRun, run_in_batches
from ctxbench.metrics.faithfulness import faithfulness_for_views, sequence_logprobs
from ctxbench.prompts.formats import ModelInput


def oom_above(limit: int, calls: list):
    def run(lo, hi):
        calls.append((lo, hi))
        if hi - lo > limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (fake)")
    return run


def test_halves_until_it_fits_and_keeps_that_size(caplog):
    calls = []
    # 8 and 4 fail; then 2 at a time: [0,2) [2,4) ... [8,10) and the last item: 6 passes, where ceil(11 / 8) = 2
    assert run_in_batches(11, 8, oom_above(3, calls), what="test") == BatchRun(size=2, passes=6, retries=2)
    assert calls == [(0, 8), (0, 4), (0, 2), (2, 4), (4, 6), (6, 8), (8, 10), (10, 11)]
    assert caplog.text.count("out of GPU memory") == 2


def test_no_out_of_memory_counts_ceil_n_over_batch():
    calls = []
    assert run_in_batches(11, 4, oom_above(99, calls), what="test") == BatchRun(size=4, passes=3, retries=0)
    assert calls == [(0, 4), (4, 8), (8, 11)]
    assert run_in_batches(0, 4, oom_above(99, []), what="test") == BatchRun(size=4, passes=0, retries=0)


def test_out_of_memory_at_one_item_is_raised():
    with pytest.raises(torch.cuda.OutOfMemoryError):
        run_in_batches(3, 4, oom_above(0, []), what="test")


class TinyLM(torch.nn.Module):
    """A causal LM in miniature (embedding + linear over a running mean): enough for teacher-forced log-probs. It
    raises out-of-memory for batches larger than ``limit``, as a GPU would."""

    def __init__(self, vocab=11, dim=5, limit=2):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.out = torch.nn.Embedding(vocab, dim), torch.nn.Linear(dim, vocab)
        self.limit, self.sizes = limit, []

    def forward(self, input_ids):
        self.sizes.append(input_ids.shape[0])
        if input_ids.shape[0] > self.limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (fake)")
        h = self.emb(input_ids).cumsum(1) / torch.arange(1, input_ids.shape[1] + 1).view(1, -1, 1)
        return type("Out", (), {"logits": self.out(h)})()


def test_deletion_passes_shrink_and_score_as_before():
    seqs = torch.randint(0, 11, (7, 9), generator=torch.Generator().manual_seed(1))
    model = TinyLM(limit=2)
    stats = {}
    got = sequence_logprobs(model, seqs, gen_start=6, batch_size=8, stats=stats)
    # 7 fails, 4 fails, then 2 + 2 + 2 + 1: four passes ran, where ceil(7 / 8) = 1
    assert model.sizes == [7, 4, 2, 2, 2, 1]
    assert stats == {"forward_passes": 4, "oom_retries": 2}
    # Hand computation: sum over positions 6..8 of log softmax(logits at t-1)[token t], one sequence at a time.
    with torch.no_grad():
        want = []
        for s in seqs:
            logits = TinyLM(limit=99)(s[None, :-1]).logits[0]
            lp = torch.log_softmax(logits.double(), -1)
            want.append(sum(float(lp[t - 1, s[t]]) for t in range(6, 9)))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_faithfulness_counts_the_passes_that_ran():
    """The deletion stats after halving: the passes the model completed (its own log), not ceil(distinct / batch)."""
    model = TinyLM(limit=3)
    P, G = 6, 3
    ids = torch.randint(1, 11, (P + 2 + G,), generator=torch.Generator().manual_seed(2))
    mi = ModelInput(input_ids=ids, prompt_positions=torch.arange(1, P + 1), prompt_offsets=[], gen_start=P + 2, text="")
    stats = {}
    faithfulness_for_views(model, mi, {"seq": np.arange(P, dtype=float)}, pad_id=0, batch_size=8, stats=stats)
    # K = P = 6 steps: 7 distinct deleted sets; 7 and 4 fail (limit 3), then 2 + 2 + 2 + 1
    assert stats["sequences"] == 7 and -(-7 // 8) == 1
    completed = [s for s in model.sizes if s <= model.limit]
    assert model.sizes == [7, 4, 2, 2, 2, 1] and sum(completed) == 7
    assert stats["forward_passes"] == len(completed) == 4


def test_ablation_passes_shrink_and_score_as_before():
    from ctxbench.attribution.perturbation import ablated_token_scores

    ids = torch.randint(0, 10, (12,), generator=torch.Generator().manual_seed(2))
    ablations = [torch.tensor(p) for p in ([5, 6], [1], [3, 4], [8], [2])]
    small = TinyLM(limit=2)
    ref, got = ablated_token_scores(small, ids, 9, ablations, pad_id=10, batch_size=4)
    # the intact pass (1), then 4 fails, and 2 + 2 + 1 in the order of the ablations' first positions
    assert small.sizes == [1, 4, 2, 2, 1]
    ref_big, want = ablated_token_scores(TinyLM(limit=99), ids, 9, ablations, pad_id=10, batch_size=4)
    np.testing.assert_allclose(ref, ref_big, rtol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # and each row is its own ablation's log-probabilities, computed alone
    with torch.no_grad():
        seq = ids.clone()
        seq[torch.tensor([3, 4])] = 10
        lp = torch.log_softmax(TinyLM(limit=99)(seq[None, :-1]).logits[0, 8:].double(), -1)
    np.testing.assert_allclose(got[2], lp.gather(-1, ids[9:, None])[:, 0].numpy(), rtol=1e-6)
