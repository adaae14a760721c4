"""context_cite: the LASSO against its optimality conditions and a closed form, recovery of an exact sparse linear
target (end to end through a model whose log-probabilities are that function), per-example seeding, and a tiny Llama."""

import numpy as np
import pytest
import torch

from ctxbench.attribution.base import InputContext
from ctxbench.attribution.context_cite import (ContextCiteAttributor, ablation_masks, example_rng, fit_surrogate,
                                               lasso, r_squared, split_heldout)

from helpers.tiny_models import EOS, GEN_START, IDS, PROMPT_UNITS, VOCAB, SentenceTokenizer, make_input, tiny_model


def test_lasso_meets_its_optimality_conditions():
    rng = np.random.default_rng(0)
    X = (rng.random((40, 10)) < 0.5).astype(float)
    y = X @ rng.normal(size=10) + 0.3 * rng.normal(size=40)
    alpha = 0.05
    w, b = lasso(X, y, alpha)
    # KKT: the gradient of the squared loss, (1/n) X^T r, is alpha * sign(w) where w != 0 and within [-alpha, alpha]
    grad = X.T @ (y - b - X @ w) / len(y)
    assert abs((y - b - X @ w).mean()) < 1e-9  # the intercept is optimal
    nz = w != 0
    assert 0 < nz.sum() < 10
    np.testing.assert_allclose(grad[nz], alpha * np.sign(w[nz]), atol=1e-8)
    assert (np.abs(grad[~nz]) <= alpha + 1e-8).all()


def test_lasso_on_an_orthogonal_design_is_soft_thresholding():
    H = np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]], dtype=float)
    X = np.vstack([H[:, 1:]] * 5)  # centred, orthogonal columns of +-1
    y = X @ np.array([0.5, -0.02, 0.2]) + 1.5
    w, b = lasso(X, y, alpha=0.1)
    ols = X.T @ (y - y.mean()) / len(y)  # each column has mean square 1
    np.testing.assert_allclose(w, np.sign(ols) * np.maximum(np.abs(ols) - 0.1, 0), atol=1e-12)
    np.testing.assert_allclose([w[1], b], [0.0, 1.5], atol=1e-12)


def test_r_squared_by_hand():
    assert r_squared([1.0, 2.0, 3.0], np.array([1.0, 2.0, 4.0])) == pytest.approx(1 - 1 / 2)
    assert np.isnan(r_squared([2.0, 2.0], np.array([2.0, 1.0])))


W_TRUE = np.array([1.5, 0.0, -0.8, 0.0, 0.0, 0.6, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0])


def test_an_exact_sparse_linear_target_is_recovered():
    masks = ablation_masks(np.random.default_rng(3), 64, W_TRUE.size, 0.5)
    y = -2.0 + masks @ W_TRUE
    train, test = split_heldout(64, 0.2, np.random.default_rng(4))
    assert test.size == 13 and np.union1d(train, test).size == 64 and np.intersect1d(train, test).size == 0
    fit = fit_surrogate(masks, y, 1e-4, train, test)
    # the L1 penalty shrinks each weight by about alpha / var(mask) = 4e-4
    np.testing.assert_allclose(fit.weights, W_TRUE, atol=2e-3)
    assert fit.intercept == pytest.approx(-2.0, abs=5e-3) and fit.heldout_r2 > 0.9999


class LinearLM(torch.nn.Module):
    """A "language model" whose log p(y_t) at every generated position is exactly c + sum of the weights of the prompt
    sentences left intact (its logits are log-probabilities, so log-softmax returns them unchanged)."""

    def __init__(self, sentence_positions, weights, c=-5.0):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the model a device
        self.sentence_positions, self.weights, self.c = sentence_positions, torch.tensor(weights), c

    def forward(self, input_ids, logits_to_keep=None):
        ids = torch.as_tensor(IDS)
        B, L = input_ids.shape
        intact = torch.stack([(input_ids[:, p] == ids[p]).all(1) for p in self.sentence_positions], 1)  # (B, K)
        logq = self.c + (intact.double() * self.weights).sum(1)  # (B,) < 0
        other = torch.log1p(-logq.exp()) - np.log(VOCAB - 1)
        logits = other[:, None, None].expand(B, L, VOCAB).clone()
        nxt = ids[1:L + 1]  # position i predicts token i + 1 of the intact input
        logits[:, torch.arange(L), nxt] = logq[:, None].expand(B, L)
        return type("Out", (), {"logits": logits.float()})


def test_the_attributor_recovers_a_linear_model_end_to_end():
    mi = make_input(ids=torch.tensor(IDS), gen_start=GEN_START, template=2)
    pp = mi.prompt_positions.tolist()
    weights = [1.2, 0.0, -0.7]
    model = LinearLM([[pp[i] for i in u] for u in PROMPT_UNITS], weights)
    sink = [3, 5]
    res = ContextCiteAttributor(alpha=1e-5, n_ablations=32, spread="share").attribute(
        model, SentenceTokenizer(), mi, sink_span=sink)
    A = res.matrix
    rows = list(range(sink[0], sink[1] + 1))
    assert np.isnan(np.delete(A, rows, 0)).all() and not np.isnan(A[rows]).any()
    assert res.rows_written.tolist() == rows
    for u, w in zip(PROMPT_UNITS, weights):  # the target sums 3 sink tokens; "share" spreads a weight over its tokens
        np.testing.assert_allclose(A[np.ix_(rows, u)], 3 * w / len(u), atol=1e-3)
    assert (A[rows, res.P:] == 0).all()
    assert res.info["ablations"] == 32 and res.info["heldout"] == 6 and res.info["heldout_r2"] > 0.9999
    assert res.info["prompt_sentences"] == 3 and res.info["nonzero_weights"] == 2


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def other_input():
    ids = list(IDS)
    ids[2:4] = [30, 31]
    return make_input(ids=torch.tensor(ids), gen_start=GEN_START, template=2)


def test_seeding_is_per_example_and_leaves_global_rngs_alone(llama):
    a, b = make_input(ids=torch.tensor(IDS), gen_start=GEN_START, template=2), other_input()
    tok = SentenceTokenizer()
    np_state, torch_state = np.random.get_state(), torch.get_rng_state()
    first = ContextCiteAttributor(alpha=1e-4, n_ablations=16, seed=7)
    ra, rb = first.attribute(llama, tok, a).matrix, first.attribute(llama, tok, b).matrix
    second = ContextCiteAttributor(alpha=1e-4, n_ablations=16, seed=7)
    rb2, ra2 = second.attribute(llama, tok, b).matrix, second.attribute(llama, tok, a).matrix
    np.testing.assert_array_equal(ra, ra2)
    np.testing.assert_array_equal(rb, rb2)
    assert not np.allclose(ra, rb)
    assert np.array_equal(np.random.get_state()[1], np_state[1]) and torch.equal(torch.get_rng_state(), torch_state)
    # the masks depend on the seed and on the example's tokens
    masks = lambda seed, mi: ablation_masks(example_rng(seed, mi.input_ids.numpy()), 16, 3, 0.5)  # noqa: E731
    assert np.array_equal(masks(7, a), masks(7, a))
    assert not np.array_equal(masks(7, a), masks(8, a)) and not np.array_equal(masks(7, a), masks(7, b))


def test_tiny_llama_matches_a_hand_loop_and_records_a_finite_r2(llama):
    mi = make_input(ids=torch.tensor(IDS), gen_start=GEN_START, template=2)
    method = ContextCiteAttributor(alpha=1e-4, seed=3, batch_size=5)
    res = method.attribute(llama, SentenceTokenizer(), mi)  # no sink span: the whole generation is explained
    ctx = InputContext.from_model_input(llama, mi)
    rng = example_rng(3, mi.input_ids.numpy())
    masks = ablation_masks(rng, 64, 3, 0.5)
    train, test = split_heldout(64, 0.2, rng)
    pp = ctx.prompt_positions.tolist()
    targets = []
    for keep in masks:  # unbatched, eager attention
        ids = torch.tensor(IDS)
        for u in np.flatnonzero(~keep):
            ids[[pp[i] for i in PROMPT_UNITS[u]]] = EOS
        with torch.no_grad():
            lp = torch.log_softmax(llama(ids[None]).logits[0, GEN_START - 1:-1].double(), -1)
        targets.append(float(lp.gather(-1, torch.tensor(IDS[GEN_START:])[:, None]).sum()))
    fit = fit_surrogate(masks, np.array(targets), 1e-4, train, test)
    for u, cols in enumerate(PROMPT_UNITS):
        np.testing.assert_allclose(res.matrix[:, cols], fit.weights[u], atol=1e-4)
    r2 = res.info["heldout_r2"]
    assert isinstance(r2, float) and np.isfinite(r2) and r2 == pytest.approx(fit.heldout_r2, abs=1e-3)
    assert res.info["ablations"] == 64 and res.info["heldout"] == 13 and res.rows_written.tolist() == list(range(8))


@pytest.mark.parametrize("kw,name", [({"keep_prob": 1.0}, "keep_prob"), ({"holdout": 0.0}, "holdout"),
                                     ({"alpha": -1.0}, "alpha"), ({"n_ablations": 3}, "n_ablations"),
                                     ({"spread": "x"}, "spread"), ({"batch_size": 0}, "batch_size")])
def test_bad_parameters_are_refused(kw, name):
    with pytest.raises(ValueError, match=name):
        ContextCiteAttributor(**kw)
