"""Per-token methods compute only the matrix rows the run's views read (Table 1's row view: the answer span's rows),
and the views of such a matrix equal those of the full one."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ctxbench.attribution import AttributionResult, Attributor
from ctxbench.attribution import views as V
from ctxbench.attribution.base import empty_matrix
from ctxbench.evaluation import evaluate_example

from helpers.tiny_models import FakeTokenizer, make, make_input, tiny_model


def test_rows_each_view_reads():
    assert V.rows_read(["seq"], 10, (4, 6)) is None
    assert V.rows_read(["row"], 10, (4, 6)).tolist() == [4, 5, 6]
    assert V.rows_read(["rec"], 10, (4, 6)).tolist() == list(range(7))
    assert V.rows_read(["row", "rec"], 10, (4, 6)).tolist() == list(range(7))
    assert V.rows_read(["row", "seq"], 10, (4, 6)) is None
    assert V.rows_read(["row"], 10, None) is None and V.rows_read(["rec"], 10, (4, 9)) is None
    with pytest.raises(ValueError, match="unknown view 'col'"):
        V.rows_read(["col"], 10, (4, 6))


@pytest.mark.parametrize("views", [["row"], ["rec"], ["row", "rec"], ["seq"]])
def test_views_of_the_rows_read_equal_the_full_matrix(views):
    rng = np.random.default_rng(0)
    P, G, span = 7, 9, (3, 5)
    A = rng.normal(size=(G, P + G)).astype(np.float32)  # negatives are clamped by the views
    A[rng.random(A.shape) < 0.1] = np.nan
    rows = V.rows_read(views, G, span)
    part = A.copy()
    if rows is not None:
        part[np.setdiff1d(np.arange(G), rows)] = np.nan  # what a method leaves in the rows it did not compute
    for v in views:
        np.testing.assert_array_equal(V.view(v, part, P, span), V.view(v, A, P, span))


PER_TOKEN = [("integrated_gradients", {"ig_steps": 3, "ig_batch": 2}), ("input_x_gradient", {}),
             ("attention", {}), ("attention", {"times_ig": True, "ig_steps": 2}), ("attnlrp", {}),
             ("attnlrp", {"row_batch": 2}), ("ifr_all_positions", {}), ("random", {"seed": 3})]


@pytest.mark.parametrize("method,params", PER_TOKEN, ids=[f"{m}{p or ''}" for m, p in PER_TOKEN])
def test_per_token_methods_compute_only_the_requested_rows(method, params):
    model, tok, mi = tiny_model("llama"), FakeTokenizer(), make_input()
    G = int(mi.input_ids.numel()) - mi.gen_start
    full = make(method, **params).attribute(model, tok, mi, (2, 3), None)
    part = make(method, **params).attribute(model, tok, mi, (2, 3), None, rows=[3, 1])
    assert part.rows_written.tolist() == [1, 3] and full.rows_written.tolist() == list(range(G))
    np.testing.assert_allclose(part.matrix[[1, 3]], full.matrix[[1, 3]], rtol=1e-5, atol=1e-7)
    assert np.isnan(part.matrix[[0, 2, 4]]).all()


def test_integrated_gradients_runs_one_backward_per_requested_row(monkeypatch):
    import ctxbench.attribution.baselines as B

    calls = []
    real = torch.autograd.grad
    monkeypatch.setattr(B.torch.autograd, "grad", lambda *a, **k: calls.append(1) or real(*a, **k))
    model, tok, mi = tiny_model("llama"), FakeTokenizer(), make_input()
    make("integrated_gradients", ig_steps=4, ig_batch=2).attribute(model, tok, mi, None, None, rows=[2, 4])
    assert len(calls) == 2 * 2  # 2 batches of points x 2 rows (5 rows when all are asked for)


def test_span_methods_ignore_the_request():
    model, tok, mi = tiny_model("llama"), FakeTokenizer(), make_input()
    for method in ("ifr_multi_hop", "ifr_multi_hop_both"):
        a = make(method).attribute(model, tok, mi, (2, 4), (0, 1))
        b = make(method).attribute(model, tok, mi, (2, 4), (0, 1), rows=[3])
        np.testing.assert_array_equal(a.matrix, b.matrix)


def test_bad_rows_are_refused():
    model, tok, mi = tiny_model("llama"), FakeTokenizer(), make_input()
    with pytest.raises(ValueError, match=r"rows must be generated-token indices in \[0, 5\)"):
        make("random").attribute(model, tok, mi, None, None, rows=[5])


class _Spy(Attributor):
    name = "spy"

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        self.rows = ctx.rows
        A = empty_matrix(ctx.G, ctx.P)
        A[ctx.row_indices()] = 1.0
        return AttributionResult(matrix=A, method=self.name, P=ctx.P, G=ctx.G, rows_written=ctx.row_indices())


@pytest.mark.parametrize("views,expected", [(("row",), [2, 3]), (("rec",), [0, 1, 2, 3]), (("seq", "row"), None)])
def test_the_run_asks_for_the_rows_its_views_read(views, expected):
    model, mi = tiny_model("llama"), make_input()
    prepared = SimpleNamespace(model_input=mi, sink_span=(2, 3), thinking_span=None, notes={},
                               example=SimpleNamespace(example_id="ex"))
    spy = _Spy()
    (_, result, record), = evaluate_example(model, FakeTokenizer(), prepared, {"spy": spy}, {}, views)
    assert (None if spy.rows is None else spy.rows.tolist()) == expected
