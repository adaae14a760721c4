"""Sentence-level coverage, checked by hand."""

import pytest

from ctxbench.metrics.coverage import coverage, sentence_masses, token_sentences

SENTENCES = [(0, 10), (11, 20), (20, 30)]
# t2 = [10, 11) lies between sentences 0 and 1; t7 = [9, 13) shares 1 character with sentence 0 and 2 with sentence 1.
OFFSETS = [(0, 5), (5, 10), (10, 11), (11, 15), (15, 20), (20, 25), (25, 30), (9, 13)]
W = [1.0, 2.0, 1.0, 0.5, 0.5, 1.0, -4.0, 1.0]


def test_token_assignment_and_masses():
    assert token_sentences(OFFSETS, SENTENCES).tolist() == [0, 0, -1, 1, 1, 2, 2, 1]
    masses, rest = sentence_masses(W, OFFSETS, SENTENCES)
    # s0 = 1 + 2 = 3; s1 = 0.5 + 0.5 + 1 = 2; s2 = 1 - 4 = -3; outside = t2 = 1
    assert masses.tolist() == [3.0, 2.0, -3.0]
    assert rest == 1.0
    # A tie in overlap goes to the earlier sentence: [8, 12) shares 2 characters with s0 ([8,10)) and 1 with s1
    # ([11,12)).
    assert token_sentences([(9, 11), (8, 12)], [(0, 10), (10, 20)]).tolist() == [0, 0]


def test_coverage_by_hand():
    # total = |3| + |2| + |-3| + |1| = 9
    # gold {0, 1}: E = 1/2, band (1/4, 3/4); ratios 3/9 = 0.333 (in band, > E/2, not > E), 2/9 = 0.222 (below E/2)
    assert coverage(W, OFFSETS, SENTENCES, [0, 1]) == pytest.approx(
        {"within": 0.5, "above_half": 0.5, "above_mean": 0.0})
    # gold {0, 2}: ratios 3/9 and |-3|/9 = 0.333 each: both in (1/4, 3/4), both > 1/4, neither > 1/2
    assert coverage(W, OFFSETS, SENTENCES, [2, 0]) == pytest.approx(
        {"within": 1.0, "above_half": 1.0, "above_mean": 0.0})
    # gold {0}: E = 1, band (1/2, 3/2): 0.333 is below the band
    assert coverage(W, OFFSETS, SENTENCES, [0]) == pytest.approx(
        {"within": 0.0, "above_half": 0.0, "above_mean": 0.0})
    # All mass on sentence 1 and gold {1}: ratio 1 -> in (1/2, 3/2), > 1/2, not > 1
    w = [0, 0, 0, 1.0, 1.0, 0, 0, 0]
    assert coverage(w, OFFSETS, SENTENCES, [1]) == pytest.approx(
        {"within": 1.0, "above_half": 1.0, "above_mean": 0.0})


def test_coverage_degenerate():
    assert coverage(W, OFFSETS, SENTENCES, []) is None
    assert coverage([0.0] * 8, OFFSETS, SENTENCES, [0]) == {"within": 0.0, "above_half": 0.0, "above_mean": 0.0}
    with pytest.raises(ValueError):
        coverage(W, OFFSETS, SENTENCES, [3])
