"""Recovery@10%: gold tokens from character spans, top-k with deterministic ties, recall; examples checked by hand."""

import pytest

from ctxbench.metrics.recovery import gold_token_indices, recall_at_fraction, top_k_count, top_k_indices

# 25 tokens, token i covers characters [3i, 3i + 2) (one space between tokens); token 22 is zero-width at 66.
OFFSETS = [(3 * i, 3 * i + 2) for i in range(25)]
OFFSETS[22] = (66, 66)


def test_gold_tokens_from_spans():
    # [21, 23) is token 7 exactly; [31, 32) is inside token 10 = [30, 32); [64, 70) overlaps token 21 = [63, 65) and
    # token 23 = [69, 71) but not the zero-width token 22; the empty span [45, 45) matches nothing (token 15 = [45,
    # 47)).
    spans = [(21, 23), (31, 32), (64, 70), (45, 45)]
    assert gold_token_indices(OFFSETS, spans) == [7, 10, 21, 23]
    # The same spans given in coordinates one character to the left, shifted back by +1.
    assert gold_token_indices(OFFSETS, [(20, 22)], span_shift=1) == [7]
    # A span touching a token's end (exclusive) does not overlap it: [2, 3) is the gap after token 0.
    assert gold_token_indices(OFFSETS, [(2, 3)]) == []


def test_top_k_count_is_exact_ceil():
    assert top_k_count(25, 0.1) == 3  # ceil(2.5)
    assert top_k_count(30, 0.1) == 3  # 0.1 * 30 = 3.0000000000000004 in floats; the exact ceil is 3
    assert top_k_count(5, 0.1) == 1  # max(1, ceil(0.5))
    assert top_k_count(1024, 0.1) == 103
    with pytest.raises(ValueError):
        top_k_count(10, 0.0)


def test_recall_on_constructed_example():
    w = [0.0] * 25
    w[7], w[2], w[10], w[20] = 0.9, 0.8, 0.5, 0.5  # 10 and 20 tie: the earlier position (10) wins
    w[5] = -3.0  # negative weights are clamped to 0 and never rank first
    assert top_k_indices(w, 3).tolist() == [7, 2, 10]
    gold = [7, 10, 21, 23, 20]
    # k = ceil(0.1 * 25) = 3 -> top {7, 2, 10}; hits 7 and 10 out of 5 gold -> 2/5
    assert recall_at_fraction(w, gold) == pytest.approx(0.4)
    # fraction 0.2 -> k = 5 -> top {7, 2, 10, 20, then the first zero-weight token 0}; hits 7, 10, 20 -> 3/5
    assert recall_at_fraction(w, gold, fraction=0.2) == pytest.approx(0.6)


def test_recall_ties_and_clamping_are_positional():
    # All weights <= 0 clamp to 0: the top-k is the first k positions.
    w = [-1.0, -2.0, 0.0, -0.5, -4.0]
    assert recall_at_fraction(w, [0], fraction=0.2) == 1.0  # k = 1 -> {0}
    assert recall_at_fraction(w, [1], fraction=0.2) == 0.0
    assert recall_at_fraction([float("nan"), 1.0], [0], fraction=0.5) == 0.0  # NaN counts 0; top-1 = {1}


def test_recall_no_gold_is_none():
    assert recall_at_fraction([1.0, 2.0], []) is None
    with pytest.raises(ValueError):
        recall_at_fraction([1.0, 2.0], [2])


def test_recall_with_rank_mask():
    # Token 0 (largest weight) is a stop token: excluded from ranking and from the gold.
    w = [5.0, 1.0, 3.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    mask = [False] + [True] * 10
    # rankable n = 10 -> k = 1 -> top {2}; gold {0, 2, 4} restricted to rankable = {2, 4} -> 1/2
    assert recall_at_fraction(w, [0, 2, 4], rank_mask=mask) == pytest.approx(0.5)
    assert recall_at_fraction(w, [0], rank_mask=mask) is None


def reference_recall_skip_tokens(w, keep, gold, fraction):
    """The FlashTrace code's ``evaluate_attr_recovery_skip_tokens`` (flashtrace/improved.py), restated: weights clamped
    at 0, only ``keep`` ranked, k = max(1, ceil(len(keep) * fraction)), gold restricted to ``keep``."""
    import math

    keep = sorted(set(keep))
    gold = {g for g in gold if g in keep}
    k = min(len(keep), max(1, math.ceil(len(keep) * fraction)))
    ranked = sorted(keep, key=lambda i: (-max(w[i], 0.0), i))
    return len(gold.intersection(ranked[:k])) / len(gold)


def test_stop_masked_recall_differs_from_all_token_recall_and_equals_the_reference_formula():
    # 12 prompt tokens; 2, 5, 8, 11 are stop tokens ("," "." and spaces). The stop tokens carry large weights, as
    # FlashTrace's zeroed-out ones never do, to make the two definitions part: over all 12 tokens k = ceil(1.2) = 2
    # and the top two are stop tokens 2 and 5; over the 8 kept tokens k = ceil(0.8) = 1.
    w = [0.1, 0.9, 5.0, 0.3, 0.2, 4.0, 0.8, 0.0, 3.0, 0.0, 0.7, 2.0]
    stop = [i in (2, 5, 8, 11) for i in range(12)]
    keep = [i for i in range(12) if not stop[i]]
    gold = [1, 2, 6]  # token 2 is gold but a stop token: the masked recall leaves it out of |gold|
    # all tokens: top-2 = {2, 5}; hits {2} of 3 gold -> 1/3
    assert recall_at_fraction(w, gold, 0.1) == pytest.approx(1 / 3)
    # kept tokens: k = 1, top-1 among kept = {1} (0.9); gold among kept = {1, 6} -> 1/2
    masked = recall_at_fraction(w, gold, 0.1, rank_mask=[not s for s in stop])
    assert masked == pytest.approx(0.5)
    assert masked == pytest.approx(reference_recall_skip_tokens(w, keep, gold, 0.1))
    # fraction 0.25: k = 2 over kept -> {1, 6} -> 2/2 (all-token: k = 3 -> {2, 5, 8} -> 1/3)
    assert recall_at_fraction(w, gold, 0.25, rank_mask=[not s for s in stop]) == 1.0
    assert reference_recall_skip_tokens(w, keep, gold, 0.25) == 1.0
    assert recall_at_fraction(w, gold, 0.25) == pytest.approx(1 / 3)


def test_recall_budget_and_ceiling():
    from ctxbench.metrics.recovery import recall_budget

    mask = [i not in (2, 5, 8, 11) for i in range(12)]
    b = recall_budget(12, [1, 2, 6], 0.1, mask)
    assert (b.ranked, b.k, b.gold, b.ceiling) == (8, 1, 2, 0.5)
    b = recall_budget(12, [1, 2, 6], 0.1)
    assert (b.ranked, b.k, b.gold) == (12, 2, 3) and b.ceiling == pytest.approx(2 / 3)
    assert recall_budget(12, [2], 0.1, mask) is None  # the one gold token is a stop token


def test_scorer_skips_the_stop_tokens_of_a_method_that_removes_them():
    import numpy as np
    from types import SimpleNamespace

    from ctxbench.metrics.recovery import RecoveryScorer

    w = np.array([0.1, 0.9, 5.0, 0.3, 0.2, 4.0, 0.8, 0.0, 3.0, 0.0, 0.7, 2.0])
    stop = np.array([i in (2, 5, 8, 11) for i in range(12)])
    prepared = SimpleNamespace(evidence_tokens=[1, 2, 6])
    with_mask = SimpleNamespace(P=12, prompt_stop_mask=stop)
    without = SimpleNamespace(P=12, prompt_stop_mask=None)
    rec = RecoveryScorer(fraction=0.1)
    out = rec.score(None, None, prepared, with_mask, {"row": w})
    assert out["recovery"]["row"] == pytest.approx(0.5)
    assert out["recovery_budget"] == {"ranked": 8, "k": 1, "gold": 2, "k_over_gold": 0.5, "ceiling": 0.5,
                                      "stop_tokens_skipped": True}
    assert rec.score(None, None, prepared, without, {"row": w})["recovery"]["row"] == pytest.approx(1 / 3)
    # skip_stop_tokens=false: every method ranks every prompt token (the committed gold-continuation table's recall)
    old = RecoveryScorer(fraction=0.1, skip_stop_tokens=False).score(None, None, prepared, with_mask, {"row": w})
    assert old["recovery"]["row"] == pytest.approx(1 / 3) and old["recovery_budget"]["stop_tokens_skipped"] is False
    # every gold token a stop token: skipped with the reason
    only_stop = RecoveryScorer().score(None, None, SimpleNamespace(evidence_tokens=[2, 5]), with_mask, {"row": w})
    assert only_stop["recovery"] is None and only_stop["recovery_skipped"] == "every evidence token is a stop token"


def test_per_hop_and_bridge_recall_by_hand():
    """hops=2: the recall of each step's evidence and of the bridge (evidence with no copy of the answer), under the
    ranking and budget k of recall itself; recall unchanged, and the lines without hops read as before."""
    from types import SimpleNamespace

    import numpy as np

    from ctxbench.metrics.recovery import RecoveryScorer

    # 20 prompt tokens of one character each: token i covers characters [i, i + 1)
    offsets = [(i, i + 1) for i in range(20)]
    needles = [{"span": [2, 4], "sentence": "The song is by Maroon 5.", "hop": 1},
               {"span": [10, 12], "sentence": "Its drummer is Matt Flynn.", "hop": 2}]
    example = SimpleNamespace(metadata={"needle_spans": needles, "outputs": ["Matt Flynn"]})
    prepared = SimpleNamespace(evidence_tokens=[2, 3, 10, 11], example=example,
                               model_input=SimpleNamespace(prompt_offsets=offsets))
    w = np.zeros(20)
    w[[2, 3]] = [5.0, 4.0]  # the bridge's two tokens on top: k = 2 of 20 at fraction 0.1
    result = SimpleNamespace(P=20, prompt_stop_mask=None)
    scorer = RecoveryScorer(fraction=0.1, hops=2)
    rec = scorer.score(None, None, prepared, result, {"row": w})["recovery"]["row"]
    assert rec == {"recall": 0.5, "recall@bridge": 1.0, "recall@hop1": 1.0, "recall@hop2": 0.0}
    assert [m.key for m in scorer.metrics()] == ["recall", "recall@bridge", "recall@hop1", "recall@hop2"]
    assert [m.label for m in scorer.metrics()][1:] == ["Recall@10% (bridge)", "Recall@10% (hop 1)",
                                                       "Recall@10% (hop 2)"]
    assert scorer.values(rec) == rec and RecoveryScorer().values(0.25) == {"recall": 0.25}
    assert RecoveryScorer(fraction=0.1).score(None, None, prepared, result, {"row": w})["recovery"]["row"] == 0.5
    # a subset without evidence (every needle contains the answer: no bridge) is left out, not scored 0
    example.metadata["outputs"] = ["is"]
    rec = scorer.score(None, None, prepared, result, {"row": w})["recovery"]["row"]
    assert "recall@bridge" not in rec and rec["recall@hop2"] == 0.0
    # the fingerprint of results made before: hops is neutral
    from ctxbench.core.part import settings_of

    assert "hops" not in settings_of(scorer)
