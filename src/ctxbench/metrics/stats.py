"""Statistics of per-example scores: a percentile bootstrap interval of the mean, paired comparisons of two methods
on the examples both scored (difference of means with its bootstrap interval, Wilcoxon signed-rank test), and Holm's
adjustment of a family of p-values (``holm``; the controls check of a Table-1 report uses it).

Everything is seeded through its own ``numpy.random.Generator`` (never the global RNG), so a summary is reproducible.
What the figures mean and assume: docs/metrics.md#statistics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Iterable, Mapping, Optional

import numpy as np

from ctxbench.core.errors import ConfigError


@dataclass
class StatsSettings:
    """The ``stats`` config of run_exp and the report command: bootstrap resamples, interval level, seed (run_exp:
    the top-level ``seed``), ``baseline``: compare every method with this one instead of all pairs, and ``min_n``:
    a Table-1 report tables no method row, and tests no control, on fewer examples."""

    n_resamples: int = 1000
    level: float = 0.95
    seed: int = 0
    baseline: Optional[str] = None
    # the fewest examples (pairs, for a test) a report draws an interval, a test or a control's mark from
    min_n: int = 10

    def __post_init__(self):
        try:
            _check(self.n_resamples, self.level)
        except ValueError as exc:
            raise ConfigError(f"stats.{exc}") from exc


class Interval(tuple):
    """``(low, high)`` of a bootstrap interval (both None without values), with ``n`` (values used) and ``dropped``
    (None/NaN values left out) as attributes."""

    n: int
    dropped: int

    def __new__(cls, low: Optional[float], high: Optional[float], n: int, dropped: int) -> "Interval":
        obj = super().__new__(cls, (low, high))
        obj.n, obj.dropped = n, dropped
        return obj

    @property
    def low(self) -> Optional[float]:
        return self[0]

    @property
    def high(self) -> Optional[float]:
        return self[1]


def finite_values(values: Iterable[Optional[float]]) -> tuple[np.ndarray, int]:
    """The values that are numbers (not None, not NaN) and how many were dropped."""
    vals = list(values)
    kept = [float(v) for v in vals if _finite(v)]
    return np.asarray(kept, dtype=np.float64), len(vals) - len(kept)


def _check(n_resamples: int, level: float) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def bootstrap_means(x: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Means of ``n_resamples`` resamples of ``x`` with replacement: resample b takes the indices of row b of
    ``default_rng(seed).integers(0, len(x), size=(n_resamples, len(x)))``."""
    idx = np.random.default_rng(seed).integers(0, len(x), size=(n_resamples, len(x)))
    return x[idx].mean(axis=1)


def bootstrap_ci(values: Iterable[Optional[float]], *, n_resamples: int = 1000, level: float = 0.95,
                 seed: int = 0) -> Interval:
    """Percentile bootstrap interval of the mean: the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles (linear
    interpolation) of the resampled means. None/NaN values are dropped first (``.dropped``); one value v gives (v, v),
    no value (None, None)."""
    _check(n_resamples, level)
    x, dropped = finite_values(values)
    if len(x) == 0:
        return Interval(None, None, 0, dropped)
    if len(x) == 1:
        return Interval(float(x[0]), float(x[0]), 1, dropped)
    alpha = 1.0 - level
    low, high = np.quantile(bootstrap_means(x, n_resamples, seed), [alpha / 2, 1 - alpha / 2])
    return Interval(float(low), float(high), len(x), dropped)


def describe(values: Iterable[Optional[float]], *, n_resamples: int = 1000, level: float = 0.95,
             seed: int = 0) -> dict[str, Any]:
    """``{mean, std, n, ci_low, ci_high}`` of the finite values (population std, as FlashTrace reports)."""
    x, _ = finite_values(values)
    ci = bootstrap_ci(x, n_resamples=n_resamples, level=level, seed=seed)
    if len(x) == 0:
        return {"mean": None, "std": None, "n": 0, "ci_low": None, "ci_high": None}
    return {"mean": float(x.mean()), "std": float(x.std()), "n": len(x), "ci_low": ci.low, "ci_high": ci.high}


def wilcoxon_signed_rank(diffs: np.ndarray) -> tuple[float, float, int]:
    """``(statistic, p_value, n_nonzero)`` of the two-sided Wilcoxon signed-rank test that the differences are
    symmetric about 0. Zero differences are dropped (Wilcoxon's convention); the statistic is min(W+, W-), the
    p-value scipy's (exact distribution for up to 50 non-zero differences without ties, normal approximation with
    tie correction otherwise). No non-zero difference: statistic 0 and p-value 1 (no evidence of a difference)."""
    from scipy.stats import wilcoxon

    nonzero = diffs[diffs != 0]
    if len(nonzero) == 0:
        return 0.0, 1.0, 0
    res = wilcoxon(nonzero, zero_method="wilcox", alternative="two-sided")
    return float(res.statistic), float(res.pvalue), len(nonzero)


def paired_comparison(a: Mapping[str, Optional[float]], b: Mapping[str, Optional[float]], *,
                      higher_is_better: bool, n_resamples: int = 1000, level: float = 0.95,
                      seed: int = 0, min_n: int = 1) -> dict[str, Any]:
    """Compare methods A and B on the examples both scored (``a``, ``b``: ``{example id: value}``; None/NaN on
    either side leaves the example out).

    Returns ``n`` (pairs), ``mean_a``, ``mean_b``, ``diff`` (mean of a - b) with ``ci_low``/``ci_high`` (bootstrap
    over pairs), ``statistic``/``p_value``/``n_nonzero`` of the Wilcoxon signed-rank test, ``better`` ("a", "b", or
    None for a tie or no pair: the side the mean difference favours given the direction) and ``significant`` (p-value
    below 1 - level and the interval excluding 0). On fewer than ``min_n`` pairs there is no interval and no test
    (``too_few``: True; p-value and interval None, never significant)."""
    _check(n_resamples, level)
    ids = [k for k in a if k in b and _finite(a[k]) and _finite(b[k])]
    if not ids:
        return {"n": 0, "mean_a": None, "mean_b": None, "diff": None, "ci_low": None, "ci_high": None,
                "statistic": None, "p_value": None, "n_nonzero": 0, "better": None, "significant": False}
    xa = np.asarray([float(a[k]) for k in ids])
    xb = np.asarray([float(b[k]) for k in ids])
    d = xa - xb
    diff = float(d.mean())
    better = None if diff == 0 else ("a" if (diff > 0) == higher_is_better else "b")
    if len(ids) < min_n:
        return {"n": len(ids), "mean_a": float(xa.mean()), "mean_b": float(xb.mean()), "diff": diff,
                "ci_low": None, "ci_high": None, "statistic": None, "p_value": None, "n_nonzero": int((d != 0).sum()),
                "better": better, "significant": False, "too_few": True}
    ci = bootstrap_ci(d, n_resamples=n_resamples, level=level, seed=seed)
    stat, p, nonzero = wilcoxon_signed_rank(d)
    excludes_zero = ci.low is not None and (ci.low > 0 or ci.high < 0)
    return {"n": len(ids), "mean_a": float(xa.mean()), "mean_b": float(xb.mean()), "diff": diff,
            "ci_low": ci.low, "ci_high": ci.high, "statistic": stat, "p_value": p, "n_nonzero": nonzero,
            "better": better, "significant": bool(better is not None and p < 1 - level and excludes_zero)}


def method_pairs(methods: list[str], baseline: Optional[str] = None) -> list[tuple[str, str]]:
    """``(a, b)`` pairs to compare: every method against ``baseline`` when set, else all pairs in the given order."""
    if baseline is None:
        return list(combinations(methods, 2))
    if baseline not in methods:
        raise ConfigError(f"stats.baseline: {baseline!r} is not among the methods ({', '.join(methods)}); "
                          "name one of them, or stats.baseline=null to compare all pairs")
    return [(m, baseline) for m in methods if m != baseline]


def compare_methods(values: Mapping[str, Mapping[str, Optional[float]]], *, higher_is_better: bool,
                    settings: StatsSettings) -> list[dict[str, Any]]:
    """Paired comparisons of one metric between methods (``values``: ``{method: {example id: value}}``), each
    ``{"a", "b", **paired_comparison(...)}``; the pairs of ``method_pairs``."""
    return [{"a": a, "b": b, **paired_comparison(values[a], values[b], higher_is_better=higher_is_better,
                                                 n_resamples=settings.n_resamples, level=settings.level,
                                                 seed=settings.seed, min_n=settings.min_n)}
            for a, b in method_pairs(list(values), settings.baseline)]


def holm(p_values: Iterable[Optional[float]]) -> list[Optional[float]]:
    """Holm's step-down adjusted p-values (Holm 1979, "A simple sequentially rejective multiple test procedure",
    Scand. J. Statist. 6: 65-70), in the order given. With the m p-values that are not None sorted ascending,
    p_(1) <= ... <= p_(m), the adjusted p_(i) is max over j <= i of min(1, (m - j + 1) p_(j)); rejecting where the
    adjusted p-value is below alpha is Holm's procedure at level alpha, which bounds the chance of any false rejection
    in the family by alpha. None entries (no test) stay None and do not count in m; a p-value outside [0, 1] or NaN
    is a ValueError."""
    ps = list(p_values)
    tested = [i for i, p in enumerate(ps) if p is not None]
    for i in tested:
        if not 0.0 <= float(ps[i]) <= 1.0:  # NaN fails both comparisons
            raise ValueError(f"holm: p-value {ps[i]!r} (position {i}) is not in [0, 1]")
    m = len(tested)
    out: list[Optional[float]] = [None] * len(ps)
    running = 0.0
    for j, i in enumerate(sorted(tested, key=lambda k: float(ps[k])), start=1):  # stable: ties keep their order
        running = max(running, min(1.0, (m - j + 1) * float(ps[i])))
        out[i] = running
    return out


def _finite(v: Optional[float]) -> bool:
    return v is not None and not math.isnan(float(v))
