"""Recovery@10%: gold tokens from character spans, top-k with deterministic ties, recall; examples checked by hand."""

import pytest

from ctxbench.metrics.recovery import gold_token_indices, recall_at_fraction, top_k_count, top_k_indices

# 25 tokens, token i covers characters [3i, 3i + 2) (one space between tokens); token 22 is zero-width at 66.
OFFSETS = [(3 * i, 3 * i + 2) for i in range(25)]
OFFSETS[22] = (66, 66)


def test_gold_tokens_from_spans():
    # [21, 23) is token 7 exactly; [31, 32) is inside token 10 = [30, 32); [64, 70) overlaps token 21 = [63, 65) and
    # token 23 = [69, 71) but not the zero-width token 22; the empty span [45, 45) matches nothing (token 15 = [45, 47)).
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
