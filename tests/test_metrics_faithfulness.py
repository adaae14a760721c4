"""Faithfulness metrics: curve arithmetic checked by hand, the deletion schedule, and batched deletion scoring against
a plain one-input-at-a-time computation (tiny random Llama; the real SmolLM2 in a slow test)."""

import numpy as np
import pytest
import torch

from ctxbench.metrics.faithfulness import (FaithfulnessScorer, auc, block_sizes, curve_metrics, deletion_schedule,
                                           deletion_scores, density_curve, faithfulness_for_views, mas,
                                           normalized_curve, rise, rise_ap)
from ctxbench.metrics.faithfulness import with_deletion_set
from ctxbench.prompts.formats import ModelInput

from helpers.tiny_models import random_llama

# ---------------------------------------------------------------------------------------------------------------------
# Curve arithmetic


def test_rise_mas_rise_ap_by_hand():
    s = [-2.0, -4.0, -3.0, -6.0, -10.0]  # K = 4, s_K = -10, |s_0 - s_K| = 8
    # (s - s_K) / 8 = [1, 0.75, 0.875, 0.5, 0]; running minimum -> [1, 0.75, 0.75, 0.5, 0]
    assert normalized_curve(s).tolist() == [1.0, 0.75, 0.75, 0.5, 0.0]
    # RISE = (3.0 - 1/2 - 0/2) / 4 = 0.625
    assert rise(s) == pytest.approx(0.625)
    d = [1.0, 0.5, 0.25, 0.1, 0.0]
    # ap = |n - d| = [0, 0.25, 0.5, 0.4, 0]; n + ap = [1, 1, 1.25, 0.9, 0]
    # RISE+AP = (4.15 - 0.5 - 0) / 4 = 0.9125
    assert rise_ap(s, d) == pytest.approx(0.9125)
    # MAS: clip -> [1, 1, 1, 0.9, 0]; min 0, max 1: rescale leaves it; (3.9 - 0.5) / 4 = 0.85
    assert mas(s, d) == pytest.approx(0.85)
    assert curve_metrics(s, d) == pytest.approx({"RISE": 0.625, "MAS": 0.85, "RISE+AP": 0.9125})


def test_clip_above_one_and_running_minimum():
    # s_1 above s_0: (s - s_K)/4 = [1, 1.5, 0.75, 0] -> clip [1, 1, 0.75, 0] -> min same; RISE = (2.75 - 0.5) / 3 = 0.75
    assert normalized_curve([-5.0, -3.0, -6.0, -9.0]).tolist() == [1.0, 1.0, 0.75, 0.0]
    assert rise([-5.0, -3.0, -6.0, -9.0]) == pytest.approx(0.75)
    # A curve that recovers: [1, 0.25, 0.75, 0] -> running min [1, 0.25, 0.25, 0]; RISE = (1.5 - 0.5) / 3 = 1/3
    assert normalized_curve([-5.0, -8.0, -6.0, -9.0]).tolist() == [1.0, 0.25, 0.25, 0.0]
    assert rise([-5.0, -8.0, -6.0, -9.0]) == pytest.approx(1 / 3)
    # Deletion raising the probability (s_0 < s_K): (s - s_K)/2 = [-1, -0.5, 0] -> clip 0 everywhere; RISE = 0
    assert rise([-5.0, -4.0, -3.0]) == 0.0


def test_min_max_rescale():
    # A density that does not end at 0 (hand-made) makes the rescale active.
    s = [-1.0, -2.0, -3.0]  # n = [1, 0.5, 0]
    d = [1.0, 0.9, 0.2]  # ap = [0, 0.4, 0.2]; n + ap = [1, 0.9, 0.2]
    assert rise(s) == pytest.approx(0.5)  # (1.5 - 0.5 - 0) / 2
    assert rise_ap(s, d) == pytest.approx(0.75)  # (2.1 - 0.5 - 0.1) / 2
    # c = [1, 0.9, 0.2] -> (c - 0.2) / 0.8 = [1, 0.875, 0]; MAS = (1.875 - 0.5) / 2 = 0.6875
    assert mas(s, d) == pytest.approx(0.6875)


def test_flat_curve():
    # s_0 = s_K: no scale. Equal steps carry no evidence (the running minimum stays at 1), higher steps count 1,
    # lower ones 0. Fully flat: n = [1, 1, 1]; RISE = (3 - 0.5 - 0.5) / 2 = 1 (the worst score).
    s = [-3.0, -3.0, -3.0]
    assert normalized_curve(s).tolist() == [1.0, 1.0, 1.0]
    assert rise(s) == 1.0
    d = [1.0, 0.5, 0.0]
    # ap = [0, 0.5, 1]; n + ap = [1, 1.5, 2]; RISE+AP = (4.5 - 0.5 - 1) / 2 = 1.5
    assert rise_ap(s, d) == pytest.approx(1.5)
    # c = clip(...) = [1, 1, 1] is flat: the min-max rescale is 0/0 -> linspace [1, 0.5, 0]; MAS = (1.5 - 0.5) / 2 = 0.5
    assert mas(s, d) == pytest.approx(0.5)
    # Flat ends with a dip in between: [-3, -2, -4, -3] -> [1 (no evidence), 1 (above), 0 (below), 0 (min)]
    assert normalized_curve([-3.0, -2.0, -4.0, -3.0]).tolist() == [1.0, 1.0, 0.0, 0.0]
    assert rise([-3.0, -2.0, -4.0, -3.0]) == pytest.approx(0.5)  # (2 - 0.5 - 0) / 3


def test_no_steps_is_nan():
    assert np.isnan(auc([0.3]))
    assert all(np.isnan(v) for v in curve_metrics([-1.0], [1.0]).values())


# ---------------------------------------------------------------------------------------------------------------------
# Schedule and density


def test_schedule_p7():
    # P = 7 < 20: K = 7 blocks of one token. Order by descending w, ties by position:
    # 0.5 (1), 0.5 (2), 0.3 (4), 0.2 (5), 0.1 (0), 0.1 (6), 0 (3)
    w = [0.1, 0.5, 0.5, 0.0, 0.3, 0.2, 0.1]
    sched = deletion_schedule(w)
    assert [b.tolist() for b in sched.blocks] == [[1], [2], [4], [5], [0], [6], [3]]
    # sum w = 1.7; cumulative masses 0.5, 1.0, 1.3, 1.5, 1.6, 1.7, 1.7 -> d = 1 - cum / 1.7
    assert sched.density == pytest.approx([1, 1.2 / 1.7, 0.7 / 1.7, 0.4 / 1.7, 0.2 / 1.7, 0.1 / 1.7, 0, 0])


def test_schedule_p45():
    # K = 20, 45 = 20 * 2 + 5: the first 5 blocks have 3 tokens, the other 15 have 2.
    assert block_sizes(45) == [3] * 5 + [2] * 15
    sched = deletion_schedule(np.arange(45, dtype=float))  # distinct weights: order 44, 43, ..., 0
    assert sched.steps == 20
    assert sched.blocks[0].tolist() == [44, 43, 42]
    assert sched.blocks[4].tolist() == [32, 31, 30]
    assert sched.blocks[5].tolist() == [29, 28]
    assert sched.blocks[-1].tolist() == [1, 0]
    # sum w = 990; block 0 mass 129 -> d_1 = 1 - 129/990
    assert sched.density[1] == pytest.approx(1 - 129 / 990)
    assert sched.density[-1] == pytest.approx(0.0)
    assert block_sizes(20) == [1] * 20 and block_sizes(0) == []


def test_schedule_rank_mask():
    # Tokens 1 and 3 are stop tokens: 5 rankable tokens -> K = 5; order among 0, 2, 4, 5, 6 (w .1 .5 .3 .2 .1)
    w = [0.1, 0.5, 0.5, 0.0, 0.3, 0.2, 0.1]
    mask = [True, False, True, False, True, True, True]
    sched = deletion_schedule(w, rank_mask=mask)
    assert [b.tolist() for b in sched.blocks] == [[2], [4], [5], [0], [6]]
    # rankable mass 1.2; cumulative .5 .8 1.0 1.1 1.2
    assert sched.density == pytest.approx([1, 0.7 / 1.2, 0.4 / 1.2, 0.2 / 1.2, 0.1 / 1.2, 0])


def test_zero_or_negative_mass_density_is_linear():
    blocks = deletion_schedule([0.0] * 5).blocks
    assert density_curve([0.0] * 5, blocks).tolist() == pytest.approx([1, 0.8, 0.6, 0.4, 0.2, 0])
    assert density_curve([1.0, -2.0], deletion_schedule([1.0, -2.0]).blocks).tolist() == [1.0, 0.5, 0.0]
    with pytest.raises(ValueError):
        deletion_schedule([1.0, float("nan")])


# ---------------------------------------------------------------------------------------------------------------------
# Deletion scoring on a tiny random Llama

PAD = 99  # the EOS id of the toy vocabulary


@pytest.fixture(scope="module")
def tiny_llama():
    return random_llama(100, max_position_embeddings=128, attn_implementation="eager")


def _toy_input(P=15, template=3, G=6, seed=1) -> ModelInput:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 99, (template + P + 2 + G,), generator=g)
    ids[-1] = PAD  # the generation ends with EOS
    return ModelInput(input_ids=ids, prompt_positions=torch.arange(template, template + P), prompt_offsets=[],
                      gen_start=template + P + 2, text="")


def _one_at_a_time(model, mi: ModelInput, blocks) -> list[float]:
    """The plain computation: full forward (eager, all logits) on each perturbed input, one input at a time."""
    ids = mi.input_ids.clone()
    deleted: list[int] = []
    out = []
    for step in range(len(blocks) + 1):
        if step:
            deleted += list(blocks[step - 1])
        x = ids.clone()
        x[mi.prompt_positions[deleted]] = PAD
        with torch.no_grad():
            logp = torch.log_softmax(model(x[None]).logits[0].double(), -1)
        out.append(sum(float(logp[t - 1, x[t]]) for t in range(mi.gen_start, x.numel())))
    return out


def test_batched_deletion_scores_match_plain(tiny_llama):
    mi = _toy_input(P=45)
    sched = deletion_schedule(np.random.default_rng(0).random(45))
    expected = _one_at_a_time(tiny_llama, mi, sched.blocks)
    for bs in (1, 4, 64):
        got = deletion_scores(tiny_llama, mi, sched.blocks, PAD, batch_size=bs)
        assert got.shape == (21,)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    # The model's own attention implementation is restored after the sdpa passes.
    assert tiny_llama.config._attn_implementation == "eager"


def test_views_share_inputs(tiny_llama):
    mi = _toy_input(P=12)
    w = np.random.default_rng(1).random(12)
    views = {"seq": w, "row": 3 * w, "rec": -w}  # seq and row rank alike; rec is the reverse ranking
    stats = {}
    res = faithfulness_for_views(tiny_llama, mi, views, PAD, batch_size=5, stats=stats)
    # K = 12: 13 inputs per view, 39 requested; distinct: nothing deleted, 11 partial sets for seq(=row),
    # 11 others for rec (the bottom t tokens are never the top t for t < 12), everything deleted -> 24
    assert stats == {"sequences": 24, "reused": 0, "requested": 39, "forward_passes": 5}
    for view, wv in views.items():
        sched = deletion_schedule(wv)
        expected = _one_at_a_time(tiny_llama, mi, sched.blocks)
        np.testing.assert_allclose(res[view]["curve"], expected, atol=1e-5)
        assert res[view]["density"] == pytest.approx(sched.density.tolist())
        assert {k: res[view][k] for k in ("RISE", "MAS", "RISE+AP")} == pytest.approx(
            curve_metrics(expected, sched.density), abs=1e-9)
    assert res["seq"]["curve"] == res["row"]["curve"]
    # rec's weights sum below 0: its density is the straight line
    assert res["rec"]["density"] == pytest.approx(np.linspace(1, 0, 13).tolist())


def test_scorer_reuses_an_examples_inputs_across_methods(tiny_llama):
    """Methods scored one after another on one example run the inputs they share once (nothing deleted for all,
    everything rankable deleted for those with the same rank mask); the curves are those of a fresh computation."""
    from types import SimpleNamespace

    tok = SimpleNamespace(eos_token_id=PAD)
    mi = _toy_input(P=12)
    rng = np.random.default_rng(3)
    scorer = FaithfulnessScorer(batch_size=5)

    def score(model, mi, w, stop=None):
        prepared, result = SimpleNamespace(model_input=mi), SimpleNamespace(prompt_stop_mask=stop)
        rec = scorer.score(model, tok, prepared, result, {"row": w})
        return rec["faithfulness"]["row"]["curve"], rec["faithfulness_stats"]

    def fresh(mi, w, stop=None):
        mask = None if stop is None else ~stop
        return faithfulness_for_views(tiny_llama, mi, {"row": w}, PAD, rank_mask=mask, batch_size=5)["row"]["curve"]

    stop = np.zeros(12, bool)
    stop[[2, 7]] = True
    w1, w2, w3 = rng.random(12), rng.random(12), rng.random(12)
    # K = 12: 13 inputs each; the first method runs them all
    c1, st1 = score(tiny_llama, mi, w1)
    assert (st1["sequences"], st1["reused"], st1["forward_passes"]) == (13, 0, 3)
    c2, st2 = score(tiny_llama, mi, w2)  # same rankable tokens: step 0 and the last input are reused
    assert (st2["sequences"], st2["reused"], st2["forward_passes"]) == (11, 2, 3)
    c3, st3 = score(tiny_llama, mi, w3, stop)  # K = 10 over the 10 rankable tokens; its last input is its own

    def deleted_sets(w, mask=None):
        order = deletion_schedule(w, mask).blocks
        return {frozenset(np.concatenate([np.empty(0, int), *order[:t]]).tolist()) for t in range(len(order) + 1)}

    seen = deleted_sets(w1) | deleted_sets(w2)
    shared = len(deleted_sets(w3, ~stop) & seen)  # nothing deleted, and any prefix that happens to agree
    assert shared >= 1 and (st3["sequences"], st3["reused"]) == (11 - shared, shared)
    # equal up to rounding: with inputs reused, the rest fall into other batches, and a batch's size may change how
    # the matrix products are blocked (seen once at 2e-8 relative, on two threads)
    for c, want in ((c1, fresh(mi, w1)), (c2, fresh(mi, w2)), (c3, fresh(mi, w3, stop))):
        np.testing.assert_allclose(c, want, rtol=1e-6, atol=0)
    assert c2[0] == c1[0] and c2[-1] == c1[-1] and c3[0] == c1[0]
    # another example, or another model on this one, starts afresh
    other = _toy_input(P=12, seed=2)
    assert score(tiny_llama, other, w1)[1]["reused"] == 0
    twin = type(tiny_llama)(tiny_llama.config).eval()
    c_twin, st = score(twin, other, w1)
    assert st["reused"] == 0 and c_twin == faithfulness_for_views(twin, other, {"row": w1}, PAD,
                                                                  batch_size=5)["row"]["curve"]


def test_views_with_rank_mask_and_small_p(tiny_llama):
    mi = _toy_input(P=5, G=3)
    mask = np.array([True, False, True, True, False])
    w = np.array([0.5, 9.0, 0.1, 0.3, 8.0])  # the stop tokens carry the largest weights but are never deleted
    res = faithfulness_for_views(tiny_llama, mi, {"seq": w}, PAD, rank_mask=mask)
    expected = _one_at_a_time(tiny_llama, mi, [[0], [3], [2]])
    np.testing.assert_allclose(res["seq"]["curve"], expected, atol=1e-5)
    assert res["seq"]["density"] == pytest.approx([1, 0.4 / 0.9, 0.1 / 0.9, 0])
    # No rankable token at all: nothing to delete, metrics undefined
    none = faithfulness_for_views(tiny_llama, mi, {"seq": w}, PAD, rank_mask=np.zeros(5, bool))
    assert np.isnan(none["seq"]["RISE"]) and len(none["seq"]["curve"]) == 1
    with pytest.raises(ValueError):
        faithfulness_for_views(tiny_llama, mi, {"seq": w[:4]}, PAD)


# ---------------------------------------------------------------------------------------------------------------------
# The real model


@pytest.mark.slow
def test_deletion_scores_smollm2(smollm2):
    from ctxbench.prompts.formats import build_model_input

    tok, model = smollm2.tokenizer, smollm2.model
    prompt = ("Paris is the capital of France. The Seine flows through Paris. Berlin is the capital of Germany. "
              "Madrid is the capital of Spain.\nWhat is the capital of Germany?")
    mi = build_model_input(tok, prompt, "The capital of Germany is Berlin.", "table1")
    sched = deletion_schedule(np.random.default_rng(0).random(mi.P))
    assert sched.steps == 20 and mi.P > 20
    got = deletion_scores(model, mi, sched.blocks, tok.eos_token_id, batch_size=8)
    expected = []
    ids = mi.input_ids
    for t in range(21):
        x = ids.clone()
        deleted = np.concatenate([np.empty(0, np.int64)] + [np.asarray(b) for b in sched.blocks[:t]])
        x[mi.prompt_positions[torch.as_tensor(deleted, dtype=torch.long)]] = tok.eos_token_id
        with torch.no_grad():
            logp = torch.log_softmax(model(x[None].to(smollm2.device)).logits[0].double(), -1).cpu()
        expected.append(float(logp[torch.arange(mi.gen_start - 1, x.numel() - 1), x[mi.gen_start:]].sum()))
    # float32 sdpa in padded batches vs eager one at a time: the sums differ by about 1e-5 of their size (1.2e-4 at
    # -9.5 seen on a loaded machine), while deleting a wrong token moves a score by far more than 1e-3
    np.testing.assert_allclose(got, expected, rtol=3e-5, atol=1e-4)
    assert got[0] > got[-1]  # deleting the whole prompt makes the answer less likely


def test_common_deletion_sets(tiny_llama):
    """``common_sets``: every method also scored under one deletion set for all. For a method without a stop mask,
    ``all`` is its own set (nothing run again) and ``nonstop`` deletes only the tokens the stop rule keeps; for
    FlashTrace (a stop mask) ``nonstop`` is its own set and ``all`` deletes every prompt token."""
    from types import SimpleNamespace

    from ctxbench.attribution.base import stop_mask

    # a toy tokenizer: ids divisible by 5 decode to ",", the others to a word
    tok = SimpleNamespace(eos_token_id=PAD, decode=lambda ids: "," if ids[0] % 5 == 0 else " w")
    mi = _toy_input(P=14)
    stop = stop_mask(tok, mi.input_ids[mi.prompt_positions])
    assert 0 < stop.sum() < 14  # the toy prompt has stop tokens to tell the sets apart
    w = np.random.default_rng(5).random(14)
    scorer = FaithfulnessScorer(batch_size=4, common_sets=["all", "nonstop"])
    assert [m.key for m in scorer.metrics()] == ["RISE", "MAS", "RISE+AP", "RISE@all", "MAS@all",
                                                 "RISE@nonstop", "MAS@nonstop"]

    def fresh(mask):
        return faithfulness_for_views(tiny_llama, mi, {"row": w}, PAD, rank_mask=mask, batch_size=4)["row"]

    for method_stop in (None, stop):
        rec = scorer.score(tiny_llama, tok, SimpleNamespace(model_input=mi),
                           SimpleNamespace(prompt_stop_mask=method_stop), {"row": w})
        row, st = rec["faithfulness"]["row"], rec["faithfulness_stats"]
        own = fresh(None if method_stop is None else ~stop)
        assert row["RISE"] == pytest.approx(own["RISE"], abs=1e-6)
        for name, mask in (("all", None), ("nonstop", ~stop)):
            want = fresh(mask)
            got = row["common"][name]
            np.testing.assert_allclose(got["curve"], want["curve"], rtol=1e-6)
            assert scorer.values(row)[f"RISE@{name}"] == pytest.approx(want["RISE"], abs=1e-6)
            assert scorer.values(row)[f"MAS@{name}"] == pytest.approx(want["MAS"], abs=1e-6)
        same = "all" if method_stop is None else "nonstop"
        assert st[f"common_{same}"]["sequences"] == 0  # the method's own set: every input taken from the memo
        np.testing.assert_allclose(row["common"][same]["curve"], row["curve"])
        assert row["deletion_set"] == same
        # without common sets, the figures under the method's own set are its main ones (the same deletions);
        # under the other set it has none
        bare = FaithfulnessScorer(batch_size=4).score(tiny_llama, tok, SimpleNamespace(model_input=mi),
                                                      SimpleNamespace(prompt_stop_mask=method_stop), {"row": w})
        got = FaithfulnessScorer().values(bare["faithfulness"]["row"])
        other = "nonstop" if same == "all" else "all"
        assert got[f"RISE@{same}"] == pytest.approx(row["RISE"], abs=1e-9) and got[f"RISE@{other}"] is None
    with pytest.raises(ValueError, match="common_sets"):
        FaithfulnessScorer(common_sets=["some"])


def test_lines_written_before_the_deletion_set_was_recorded_read_it_from_the_class():
    """A results line of a method without a stop mask, written before the scorer recorded its set and without common
    sets (the gold Table-1 lanes): its main figures are its RISE@all; FlashTrace's (its class deletes the non-stop
    tokens) are its RISE@nonstop, and it has no RISE@all."""
    from ctxbench.attribution.baselines import AttentionAttributor
    from ctxbench.attribution.multi_hop import MultiHopBothAttributor
    from ctxbench.jobs.results import own_deletion_set

    flash = "ctxbench.attribution.multi_hop.MultiHopBothAttributor"
    config = {"attribution": {"ifr_multi_hop_both": {"_target_": flash},
                              "attention": {"_target_": "ctxbench.attribution.baselines.AttentionAttributor"},
                              "gone": {"_target_": "no_such_module.Method"}}}
    assert MultiHopBothAttributor.deletion_set == "nonstop" and AttentionAttributor.deletion_set == "all"
    assert own_deletion_set(config, "ifr_multi_hop_both") == "nonstop"
    assert own_deletion_set(config, "attention") == own_deletion_set(config, "gone") == "all"
    line = {"method": "attention", "faithfulness": {"row": {"RISE": 0.3, "MAS": 0.4, "RISE+AP": 0.5}}}
    for own, other in (("all", "nonstop"), ("nonstop", "all")):
        got = FaithfulnessScorer().values(with_deletion_set(line, own)["faithfulness"]["row"])
        assert (got[f"RISE@{own}"], got[f"MAS@{own}"], got[f"RISE@{other}"]) == (0.3, 0.4, None)
    assert "deletion_set" not in line["faithfulness"]["row"]  # the caller's line is not changed
