"""Token views of an attribution matrix (CAGE; docs/attribution.md, "Token views").

Each view returns a vector over the P+G columns; the prompt weights are ``v[:P]``. ``Abar`` is the matrix with NaN
set to 0, negatives clamped to 0 and every non-empty row normalised to sum 1. Spans are closed intervals in
generated-token coordinates; None means the whole generation.
"""

from __future__ import annotations

import numpy as np


def normalise(A: np.ndarray) -> np.ndarray:
    A = np.clip(np.nan_to_num(np.asarray(A, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0), 0.0, None)
    s = A.sum(1, keepdims=True)
    return np.divide(A, s, out=np.zeros_like(A), where=s > 0)


def _span(A: np.ndarray, sink_span):
    G = A.shape[0]
    if sink_span is None:
        return 0, G - 1
    s, e = int(sink_span[0]), int(sink_span[1])
    if not 0 <= s <= e < G:
        raise ValueError(f"sink_span={list(sink_span)} outside the {G} rows")
    return s, e


def seq(A: np.ndarray, P: int) -> np.ndarray:
    """Sum of all normalised rows."""
    return normalise(A).sum(0)


def row(A: np.ndarray, P: int, sink_span=None) -> np.ndarray:
    """Sum of the normalised rows of the sink span."""
    s, e = _span(A, sink_span)
    return normalise(A)[s:e + 1].sum(0)


def rec(A: np.ndarray, P: int, sink_span=None) -> np.ndarray:
    """Recursive view: each sink row hands the mass it puts on an earlier generated token k on to row k
    (k from the latest down), then the per-sink vectors are summed.

    All sink rows are processed together; a row t only passes on columns of tokens k < t (its own column and later
    ones stay as they are), exactly as the per-row loop of CAGE's definition.
    """
    Ab = normalise(A)
    s, e = _span(Ab, sink_span)
    ts = np.arange(s, e + 1)
    R = Ab[ts].copy()
    for k in range(e - 1, -1, -1):
        coef = R[:, P + k] * (ts > k)
        if not coef.any():
            continue
        R += coef[:, None] * Ab[k][None, :]
        R[ts > k, P + k] = 0.0
    return R.sum(0)


VIEWS = {"seq": lambda A, P, span=None: seq(A, P), "row": row, "rec": rec}


def rows_read(names, G: int, sink_span=None):
    """The matrix rows the given views read, ascending, or None when that is every row: seq reads all, row the sink
    span's, rec the rows up to the span's end (it hands mass back to earlier generated tokens)."""
    s, e = (0, G - 1) if sink_span is None else (int(sink_span[0]), int(sink_span[1]))
    read: set = set()
    for name in names:
        if name not in VIEWS:
            raise ValueError(f"unknown view {name!r}; expected one of {sorted(VIEWS)}")
        read |= set(range(G)) if name == "seq" else set(range(s, e + 1)) if name == "row" else set(range(e + 1))
    return None if len(read) == G else np.array(sorted(read), dtype=np.int64)


def view(name: str, A: np.ndarray, P: int, sink_span=None) -> np.ndarray:
    if name not in VIEWS:
        raise ValueError(f"unknown view {name!r}; expected one of {sorted(VIEWS)}")
    return VIEWS[name](A, P, sink_span)
