"""metrics/stats.py against independent truth: coverage of a known mean, a hand loop of the bootstrap, hand
enumeration of the Wilcoxon signed-rank distribution, and seeding."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ctxbench.metrics.stats import bootstrap_ci, describe, paired_comparison, wilcoxon_signed_rank


def test_interval_covers_the_true_mean_at_about_the_nominal_rate():
    # 400 seeded samples of 30 draws from N(2, 1): a 95% interval should hold 2 in about 95% of them (measured: 95.25%;
    # the binomial s.e. over 400 trials is 0.011, and the percentile bootstrap may undercover a little).
    trials, hits = 400, 0
    for t in range(trials):
        x = np.random.default_rng(1000 + t).normal(2.0, 1.0, size=30)
        low, high = bootstrap_ci(x, n_resamples=1000, level=0.95, seed=t)
        hits += low <= 2.0 <= high
    assert 0.91 <= hits / trials <= 0.98


def test_narrower_level_gives_lower_coverage():
    trials, hits = 300, 0
    for t in range(trials):
        x = np.random.default_rng(5000 + t).exponential(1.0, size=40)
        low, high = bootstrap_ci(x, n_resamples=500, level=0.5, seed=t)
        hits += low <= 1.0 <= high
    assert 0.40 <= hits / trials <= 0.60


def _hand_quantile(sorted_vals, q):
    h = (len(sorted_vals) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (h - lo) * (sorted_vals[hi] - sorted_vals[lo])


def test_bootstrap_equals_a_hand_loop():
    values = [0.3, 0.9, 0.1, 0.55, 0.72, 0.05, 0.4]
    n, B, seed = len(values), 200, 7
    rows = np.random.default_rng(seed).integers(0, n, size=(B, n))  # the documented draw
    means = sorted(sum(values[i] for i in row) / n for row in rows)
    low, high = bootstrap_ci(values, n_resamples=B, level=0.9, seed=seed)
    assert low == pytest.approx(_hand_quantile(means, 0.05), abs=1e-12)
    assert high == pytest.approx(_hand_quantile(means, 0.95), abs=1e-12)


def test_missing_values_are_dropped_and_counted():
    ci = bootstrap_ci([0.2, None, float("nan"), 0.4, 0.6], n_resamples=100, seed=0)
    assert (ci.n, ci.dropped) == (3, 2)
    assert ci == bootstrap_ci([0.2, 0.4, 0.6], n_resamples=100, seed=0)
    assert 0.2 <= ci.low <= 0.4 <= ci.high <= 0.6
    assert tuple(bootstrap_ci([0.7, None])) == (0.7, 0.7)
    empty = bootstrap_ci([None, float("nan")])
    assert tuple(empty) == (None, None) and (empty.n, empty.dropped) == (0, 2)


def test_seeded_and_independent_of_the_global_rng():
    x = np.random.default_rng(3).random(25)
    state = np.random.get_state()
    first = bootstrap_ci(x, seed=11)
    np.random.seed(99)  # the global RNG must not matter
    assert bootstrap_ci(x, seed=11) == first
    assert bootstrap_ci(x, seed=12) != first
    np.random.set_state(state)
    assert paired_comparison(dict(enumerate(x)), dict(enumerate(x[::-1])), higher_is_better=True, seed=4) == \
        paired_comparison(dict(enumerate(x)), dict(enumerate(x[::-1])), higher_is_better=True, seed=4)


def test_describe_by_hand():
    d = describe([1.0, 2.0, None, 4.0], n_resamples=50, seed=0)
    assert d["n"] == 3 and d["mean"] == pytest.approx(7 / 3)
    assert d["std"] == pytest.approx(math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 3))
    assert 1.0 <= d["ci_low"] <= d["mean"] <= d["ci_high"] <= 4.0
    assert describe([]) == {"mean": None, "std": None, "n": 0, "ci_low": None, "ci_high": None}


def _exact_wilcoxon(diffs):
    """Enumerate every sign assignment of the ranks of |d| (no ties, no zeros): two-sided p of min(W+, W-)."""
    d = [x for x in diffs if x != 0]
    order = sorted(range(len(d)), key=lambda i: abs(d[i]))
    rank = {i: r + 1 for r, i in enumerate(order)}
    w_plus = sum(rank[i] for i in range(len(d)) if d[i] > 0)
    total = len(d) * (len(d) + 1) / 2
    stat = min(w_plus, total - w_plus)
    sums = [sum(r for r, s in zip(range(1, len(d) + 1), signs) if s) for signs in
            itertools.product([0, 1], repeat=len(d))]
    p = 2 * sum(1 for s in sums if s <= stat) / len(sums)
    return stat, min(1.0, p)


def test_wilcoxon_by_hand_on_a_tiny_case():
    # ranks of |1, -2, 3, 4| are 1..4: W+ = 8, W- = 2; P(W <= 2) = 3/16 ({}, {1}, {2}), two-sided 0.375
    stat, p, n = wilcoxon_signed_rank(np.array([1.0, -2.0, 3.0, 4.0]))
    assert (stat, n) == (2.0, 4) and p == pytest.approx(0.375)
    assert _exact_wilcoxon([1.0, -2.0, 3.0, 4.0]) == (2.0, 0.375)
    # a zero difference is dropped: three left, ranks 1..3, W- = 2, P(W <= 2) = 3/8
    stat, p, n = wilcoxon_signed_rank(np.array([1.0, -2.0, 0.0, 4.0]))
    assert (stat, n) == (2.0, 3) and p == pytest.approx(0.75)


def test_wilcoxon_equals_enumeration_and_scipy():
    from scipy.stats import wilcoxon

    for seed in range(5):
        d = np.random.default_rng(seed).normal(0.3, 1.0, size=9)
        stat, p, _ = wilcoxon_signed_rank(d)
        assert (stat, p) == pytest.approx(_exact_wilcoxon(list(d)))
        ref = wilcoxon(d)
        assert (stat, p) == pytest.approx((ref.statistic, ref.pvalue))


def test_paired_comparison_pairs_by_example_id():
    a = {"e1": 0.5, "e2": 0.7, "e3": None, "e4": 0.2, "only_a": 0.9}
    b = {"e4": 0.1, "e2": 0.4, "e1": 0.6, "e3": 0.3, "only_b": 0.0}
    c = paired_comparison(a, b, higher_is_better=True, n_resamples=200, seed=0)
    # pairs e1, e2, e4: differences -0.1, 0.3, 0.1
    assert c["n"] == 3 and c["diff"] == pytest.approx(0.1)
    assert c["mean_a"] == pytest.approx(1.4 / 3) and c["mean_b"] == pytest.approx(1.1 / 3)
    assert -0.1 - 1e-12 <= c["ci_low"] <= c["diff"] <= c["ci_high"] <= 0.3 + 1e-12
    assert c["better"] == "a" and c["significant"] is False  # three pairs cannot reach p < 0.05
    assert paired_comparison(a, b, higher_is_better=False, n_resamples=200)["better"] == "b"


def test_a_constant_improvement_is_certain():
    a = {f"e{i}": 0.1 * i for i in range(10)}
    b = {k: v + 0.25 for k, v in a.items()}  # b is worse on every example when lower is better
    c = paired_comparison(a, b, higher_is_better=False, n_resamples=300, seed=1)
    assert c["diff"] == pytest.approx(-0.25)
    assert c["ci_low"] == pytest.approx(-0.25) and c["ci_high"] == pytest.approx(-0.25)
    # all ten signs negative: exact two-sided p = 2 / 2^10
    assert c["statistic"] == 0.0 and c["p_value"] == pytest.approx(2 / 1024)
    assert c["better"] == "a" and c["significant"] is True


def test_no_difference_and_no_pairs():
    same = paired_comparison({"x": 0.3, "y": 0.5}, {"x": 0.3, "y": 0.5}, higher_is_better=True)
    assert (same["statistic"], same["p_value"], same["n_nonzero"], same["better"], same["significant"]) == \
        (0.0, 1.0, 0, None, False)
    none = paired_comparison({"x": 0.3}, {"y": 0.5}, higher_is_better=True)
    assert none["n"] == 0 and none["diff"] is None and none["better"] is None


@pytest.mark.parametrize("kwargs, word", [({"n_resamples": 0}, "n_resamples"), ({"level": 1.0}, "level")])
def test_bad_settings_name_the_parameter(kwargs, word):
    with pytest.raises(ValueError, match=word):
        bootstrap_ci([1.0, 2.0], **kwargs)
