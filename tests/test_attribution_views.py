"""Token views (docs/attribution.md) against hand-computed matrices; traces round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxbench.attribution import AttributionResult, load_trace, save_trace, views

P = 2
A = np.array([[1, 1, 0, 0, 0],
              [2, 0, 2, 0, 0],
              [0, 1, 1, 2, np.nan]], dtype=np.float32)
A_NEG = A.copy()
A_NEG[0, 2] = -5.0  # negatives are clamped before normalising: same views


@pytest.mark.parametrize("M", [A, A_NEG])
def test_seq_row_rec_by_hand(M):
    np.testing.assert_allclose(views.seq(M, P), [1.0, 0.75, 0.75, 0.5, 0.0])
    np.testing.assert_allclose(views.row(M, P, (1, 2)), [0.5, 0.25, 0.75, 0.5, 0.0])
    # t=1: 0.5 on g0 goes through row 0 -> [.75,.25,0,0,0]; t=2: g1 (0.5) via row 1, then g0 (0.5) via row 0
    np.testing.assert_allclose(views.rec(M, P, (1, 2)), [1.25, 0.75, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(views.rec(M, P, (2, 2)), [0.5, 0.5, 0.0, 0.0, 0.0])


def test_rec_keeps_own_column_and_mass():
    # IFR rows include the sink itself: row 1 keeps its own column; row 0's self-mass lands on column P+0, which
    # CAGE's loop zeroes after passing it on (r[P+k] = 0)
    M = np.array([[1, 0, 1, 0], [0, 1, 1, 2]], dtype=np.float32)
    r = views.rec(M, P, (1, 1))
    np.testing.assert_allclose(r, [0.125, 0.25, 0.0, 0.5])
    rand = np.random.default_rng(0).random((6, 10)) * np.tri(6, 10, 3)
    assert views.rec(rand, 4, None).sum() == pytest.approx(6.0)  # row-normalised mass is conserved


def test_view_dispatch_and_nan_rows():
    M = np.full((3, 5), np.nan, dtype=np.float32)
    M[2] = A[2]
    np.testing.assert_allclose(views.view("seq", M, P), views.row(M, P, (2, 2)))
    with pytest.raises(ValueError):
        views.view("bogus", M, P)
    with pytest.raises(ValueError):
        views.row(M, P, (1, 5))


def test_save_trace(tmp_path):
    res = AttributionResult(matrix=A, method="ifr_multi_hop_both", P=2, G=3,
                            hop_vectors=np.ones((2, 5), np.float32), rho=[0.5, 0.1],
                            prompt_stop_mask=np.array([False, True]), timings={"total": 1.0})
    line = save_trace(tmp_path, "ex/7", res)
    save_trace(tmp_path, 8, res, include_matrix=True)
    lines = [json.loads(x) for x in (tmp_path / "manifest.jsonl").read_text().splitlines()]
    assert lines[0] == line and line["hops"] == 1 and line["rho"] == [0.5, 0.1] and len(lines) == 2
    z = load_trace(tmp_path / line["file"])
    np.testing.assert_array_equal(z["hop_vectors"], res.hop_vectors)
    assert z["prompt_stop_mask"].tolist() == [False, True] and "matrix" not in z
    assert "matrix" in load_trace(tmp_path / lines[1]["file"])
