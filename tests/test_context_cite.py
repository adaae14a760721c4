"""context_cite: the LASSO against its optimality conditions and a closed form, the package's penalty scaling and
target by hand, recovery of an exact sparse linear target (end to end through models whose log-probabilities are that
function, for both ablations), the question kept out of the sources, per-example seeding, a tiny Llama against a
hand loop, and the weights against the context-cite package itself (its logit-probabilities and its solver) on the
same sources and masks."""

import numpy as np
import pytest
import torch

from ctxbench.attribution import context_cite as cc
from ctxbench.attribution.base import InputContext
from ctxbench.attribution.context_cite import (ContextCiteAttributor, ablation_masks, cross_validated_r2, example_rng,
                                               fit_surrogate, fold_of, lasso, logit_of_probability, r_squared,
                                               scaled_lasso)

from helpers.context_cite_package import package_logit_probs
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



def test_the_package_s_penalty_scaling_by_hand():
    """One source: the standardised column z has mean 0 and variance 1, so the package's fit is a soft threshold of
    the least-squares slope of y / T on z, mapped back: w = sign(c) max(|c| - alpha, 0) / std * T."""
    x = np.array([1, 1, 1, 0, 0, 0, 0, 0], dtype=float)  # std = sqrt(3/8 * 5/8)
    y = np.array([-1.0, -1.2, -0.8, -3.0, -3.1, -2.9, -3.3, -2.7])
    T, alpha = 3, 0.05
    std = x.std()
    z = (x - x.mean()) / std
    c = z @ (y / T - (y / T).mean()) / len(y)
    w, b = scaled_lasso(x[:, None], y, alpha, T)
    assert w[0] == pytest.approx(np.sign(c) * max(abs(c) - alpha, 0) / std * T, rel=1e-9)
    assert b == pytest.approx(y.mean() - x.mean() * w[0], rel=1e-9)
    # in the masks' own units the penalty is alpha * T * std: the plain LASSO with that alpha gives the same weight
    assert lasso(x[:, None], y, alpha * T * std)[0][0] == pytest.approx(w[0], rel=1e-9)
    # a constant source (always kept) gets weight 0, as StandardScaler's scale of 1 leaves it at 0
    w2, _ = scaled_lasso(np.c_[x, np.ones_like(x)], y, alpha, T)
    assert w2[1] == 0.0 and w2[0] == pytest.approx(w[0], rel=1e-9)


def test_the_logit_of_the_span_probability_by_hand():
    got = logit_of_probability(np.log([0.2, 0.5, 0.9]))
    np.testing.assert_allclose(got, np.log([0.2 / 0.8, 1.0, 0.9 / 0.1]), rtol=1e-12)
    assert logit_of_probability(np.array([-1e-12]))[0] == pytest.approx(np.log((1 - 1e-12) / 1e-12), rel=1e-6)
    assert logit_of_probability(np.array([-800.0]))[0] == -800.0  # P underflows: log(1 - P) = 0
    assert logit_of_probability(np.array([0.0]))[0] == np.inf


def test_folds_and_the_cross_validated_r2():
    folds = fold_of(64, 5, np.random.default_rng(0))
    assert sorted(np.bincount(folds).tolist()) == [12, 13, 13, 13, 13]
    rng = np.random.default_rng(1)
    X = (rng.random((40, 3)) < 0.5).astype(float)
    y = X @ [2.0, -1.0, 0.5] + 0.1 * rng.normal(size=40)
    f = fold_of(40, 4, rng)
    pred = np.empty(40)
    for k in range(4):  # the out-of-fold predictions written out
        w, b = scaled_lasso(X[f != k], y[f != k], 0.001, 1)
        pred[f == k] = b + X[f == k] @ w
    assert cross_validated_r2(X, y, 0.001, 1, f) == pytest.approx(r_squared(y, pred), rel=1e-12)
    assert 0.95 < r_squared(y, pred) < 1


W_TRUE = np.array([1.5, 0.0, -0.8, 0.0, 0.0, 0.6, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0])


def test_an_exact_sparse_linear_target_is_recovered():
    masks = ablation_masks(np.random.default_rng(3), 64, W_TRUE.size, 0.5)
    y = -2.0 + masks @ W_TRUE
    fit = fit_surrogate(masks, y, 1e-4, 1, fold_of(64, 5, np.random.default_rng(4)))
    # the penalty shrinks each weight by about alpha / std = 2e-4
    np.testing.assert_allclose(fit.weights, W_TRUE, atol=2e-3)
    assert fit.intercept == pytest.approx(-2.0, abs=5e-3) and fit.cv_r2 > 0.9999


def _linear_logits(input_ids, logq):
    """Logits whose log-softmax gives log q (B,) to each row's actual next token at every position (the last position's
    next token is the EOS that ends IDS) and shares the rest equally."""
    B, L = input_ids.shape
    other = torch.log1p(-logq.exp()) - np.log(VOCAB - 1)
    logits = other[:, None, None].expand(B, L, VOCAB).clone()
    nxt = torch.cat([input_ids[:, 1:], torch.full((B, 1), EOS)], 1)
    logits.scatter_(-1, nxt[..., None], logq[:, None, None].expand(B, L, 1))
    return type("Out", (), {"logits": logits.float()})


class LinearLM(torch.nn.Module):
    """A "language model" whose log p(y_t) at every generated position is exactly c + the sum of the weights of the
    prompt sentences present: with ``by_position`` (EOS-overwrite ablation) a sentence is present when its tokens stand
    at their places; otherwise (deletion) when its first token occurs in the row."""

    def __init__(self, units, weights, c=-5.0, by_position=False):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the model a device
        self.units, self.weights, self.c, self.by_position = units, torch.tensor(weights), c, by_position

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=None):
        ids = torch.as_tensor(IDS)
        if self.by_position:
            present = [(input_ids[:, p] == ids[p]).all(1) for p in self.units]
        else:
            present = [(input_ids == ids[p[0]]).any(1) for p in self.units]
        logq = self.c + (torch.stack(present, 1).double() * self.weights).sum(1)  # (B,) < 0
        return _linear_logits(input_ids, logq)


@pytest.mark.parametrize("ablation", ["delete", "eos"])
def test_the_attributor_recovers_a_linear_model_end_to_end(ablation):
    mi = make_input(ids=torch.tensor(IDS), gen_start=GEN_START, template=2)
    pp = mi.prompt_positions.tolist()
    weights = [1.2, 0.0, -0.7]
    model = LinearLM([[pp[i] for i in u] for u in PROMPT_UNITS], weights, by_position=ablation == "eos")
    sink = [3, 5]
    res = ContextCiteAttributor(alpha=1e-6, n_ablations=32, spread="share", target="log_prob",
                                ablation=ablation).attribute(model, SentenceTokenizer(), mi, sink_span=sink)
    A = res.matrix
    rows = list(range(sink[0], sink[1] + 1))
    assert np.isnan(np.delete(A, rows, 0)).all() and not np.isnan(A[rows]).any()
    assert res.rows_written.tolist() == rows
    for u, w in zip(PROMPT_UNITS, weights):  # the target sums 3 sink tokens; "share" spreads a weight over its tokens
        np.testing.assert_allclose(A[np.ix_(rows, u)], 3 * w / len(u), atol=1e-3)
    assert (A[rows, res.P:] == 0).all()
    assert res.info["ablations"] == 32 and res.info["cv_folds"] == 5 and res.info["cv_r2"] > 0.9999
    assert res.info["prompt_sentences"] == 3 and res.info["sources"] == 3 and res.info["nonzero_weights"] == 2


def test_the_question_is_not_a_source():
    """A question the data marks is never ablated and gets no weight; its effect goes to the intercept."""
    mi = make_input(ids=torch.tensor(IDS), gen_start=GEN_START, template=2)
    mi.query_tokens = PROMPT_UNITS[2]
    pp = mi.prompt_positions.tolist()
    seen = []
    model = LinearLM([[pp[i] for i in u] for u in PROMPT_UNITS], [1.2, 0.0, -0.7])
    forward = model.forward
    model.forward = lambda input_ids, **kw: seen.append(input_ids.clone()) or forward(input_ids, **kw)
    res = ContextCiteAttributor(alpha=1e-6, n_ablations=16, target="log_prob").attribute(model, SentenceTokenizer(), mi)
    assert res.info["sources"] == 2 and res.info["prompt_sentences"] == 3
    assert (res.matrix[:, PROMPT_UNITS[2]] == 0).all()
    np.testing.assert_allclose(res.matrix[:, PROMPT_UNITS[0]], 8 * 1.2, atol=1e-3)  # 8 generated tokens explained
    assert all((batch == IDS[pp[PROMPT_UNITS[2][0]]]).any(1).all() for batch in seen)  # never deleted


def test_no_source_and_one_source():
    mi = make_input(ids=torch.tensor(IDS), gen_start=GEN_START, template=2)
    mi.query_tokens = list(range(9))  # every prompt sentence is the question: nothing to attribute
    model = LinearLM([[0]], [0.0])
    res = ContextCiteAttributor().attribute(model, SentenceTokenizer(), mi)
    assert res.info["sources"] == 0 and res.info["cv_r2"] is None and (res.matrix[:, :res.P] == 0).all()
    # one source that is the whole prompt: masks keep or drop it, the weight is its effect
    mi.query_tokens = None
    one = [2, 3, 4, 5, 6, 7, 8, 9, 10]
    res = ContextCiteAttributor(alpha=1e-6, target="log_prob").attribute(
        LinearLM([one], [0.9]), _OneSentence(), mi, sink_span=[0, 0])
    assert res.info["sources"] == 1 and res.matrix[0, :res.P] == pytest.approx(0.9, abs=1e-3)


class _OneSentence(SentenceTokenizer):
    """Decodes "." as ";" so that the whole prompt is one sentence."""

    def decode(self, ids):
        return super().decode(ids).replace(".", ";")


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


@pytest.mark.parametrize("ablation", ["delete", "eos"])
def test_tiny_llama_matches_a_hand_loop_and_records_a_finite_r2(llama, ablation):
    mi = make_input(ids=torch.tensor(IDS), gen_start=GEN_START, template=2)
    method = ContextCiteAttributor(alpha=1e-4, seed=3, batch_size=5, ablation=ablation)
    res = method.attribute(llama, SentenceTokenizer(), mi)  # no sink span: the whole generation is explained
    ctx = InputContext.from_model_input(llama, mi)
    rng = example_rng(3, mi.input_ids.numpy())
    masks = ablation_masks(rng, 64, 3, 0.5)
    folds = fold_of(64, 5, rng)
    pp = ctx.prompt_positions.tolist()
    targets = []
    for keep in masks:  # one input at a time, eager attention, no padding
        ids = torch.tensor(IDS)
        gone = [pp[i] for u in np.flatnonzero(~keep) for i in PROMPT_UNITS[u]]
        if ablation == "eos":
            ids[gone] = EOS
        else:
            ids = ids[[i for i in range(len(IDS)) if i not in gone]]
        g = len(IDS) - GEN_START
        with torch.no_grad():
            lp = torch.log_softmax(llama(ids[None]).logits[0, -g - 1:-1].double(), -1)
        targets.append(float(lp.gather(-1, torch.tensor(IDS[GEN_START:])[:, None]).sum()))
    y = logit_of_probability(np.array(targets))
    fit = fit_surrogate(masks, y, 1e-4, 8, folds)
    for u, cols in enumerate(PROMPT_UNITS):
        np.testing.assert_allclose(res.matrix[:, cols], fit.weights[u], atol=1e-4)
    r2 = res.info["cv_r2"]
    assert isinstance(r2, float) and np.isfinite(r2) and r2 == pytest.approx(fit.cv_r2, abs=1e-3)
    assert res.info["ablations"] == 64 and res.rows_written.tolist() == list(range(8))


@pytest.mark.parametrize("kw,name", [({"keep_prob": 1.0}, "keep_prob"), ({"cv_folds": 1}, "cv_folds"),
                                     ({"alpha": -1.0}, "alpha"), ({"n_ablations": 1}, "n_ablations"),
                                     ({"cv_folds": 9, "n_ablations": 8}, "cv_folds"),
                                     ({"ablation": "mask"}, "ablation"), ({"target": "prob"}, "target"),
                                     ({"spread": "x"}, "spread"), ({"batch_size": 0}, "batch_size")])
def test_bad_parameters_are_refused(kw, name):
    with pytest.raises(ValueError, match=name):
        ContextCiteAttributor(**kw)


# --- against the context-cite package ----------------------------------------------------------------------------

STORY = ("Mara Quell was born in Tallin Bay. She moved to Orrick at nineteen. Orrick lies on the river Senn. "
         "The Senn floods every spring.")


def package_weights(monkeypatch, model, tok, mi, masks, rows, alpha, dropped_tokens):
    """The package's side: its ablated forward passes and logit-probabilities (with our masks in place of its seeded
    draws and our sources removed from the prompt ids), its aggregation and its solver."""
    from context_cite import utils as ccu
    from context_cite.solver import LassoRegression

    got_masks, logit_probs = package_logit_probs(monkeypatch, model, tok, mi, dropped_tokens, masks)
    assert np.array_equal(got_masks, masks)
    outputs = ccu.aggregate_logit_probs(logit_probs[:, rows[0]:rows[-1] + 1])
    weights, _ = LassoRegression(alpha).fit(got_masks, outputs, len(rows))
    return weights


@pytest.mark.parametrize("alpha", [0.01, 0.001])
def test_the_weights_equal_the_context_cite_package_s(monkeypatch, smol_tokenizer, alpha):
    from ctxbench.attribution.perturbation import SentenceUnits
    from ctxbench.prompts.formats import build_model_input

    from helpers.tiny_models import random_llama

    tok = smol_tokenizer
    model = random_llama(len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         intermediate_size=64, seed=5)
    # table1: the chat template's tokens stay when every source is removed, as the package's template does
    mi = build_model_input(tok, STORY, "She lives in Orrick.", "table1")
    ctx = InputContext.from_model_input(model, mi)
    units = SentenceUnits.of(tok, ctx)
    K = len(units.prompt)
    assert K == 4
    masks = ablation_masks(np.random.default_rng(11), 48, K, 0.5)
    monkeypatch.setattr(cc, "ablation_masks", lambda rng, n, k, p: masks)
    sink = [0, 4]
    res = ContextCiteAttributor(alpha=alpha, n_ablations=48, batch_size=3).attribute(model, tok, mi, sink_span=sink)
    ours = np.array([res.matrix[sink[0], cols[0]] for cols in units.prompt])
    rows = list(range(sink[0], sink[1] + 1))
    theirs = package_weights(monkeypatch, model, tok, mi, masks, rows, alpha,
                             [[int(p) for p in mi.prompt_positions[cols]] for cols in units.prompt])
    # scikit-learn stops at a duality gap of 1e-4 (its tol); ours runs to 1e-10
    np.testing.assert_allclose(ours, theirs, atol=2e-3 * max(1.0, np.abs(theirs).max()))
    assert np.count_nonzero(ours) == np.count_nonzero(theirs)


def test_a_bare_prompt_with_every_source_deleted_keeps_one_pad_token(llama):
    from ctxbench.attribution.context_cite import deleted_token_logprobs

    ids = torch.tensor(IDS)
    everything = torch.arange(GEN_START)  # the whole prompt, template included
    half = torch.tensor([2, 3, 4])
    got = deleted_token_logprobs(llama, ids, GEN_START, [everything, half], EOS, batch_size=2)
    for row, seq in zip(got, [torch.cat([torch.tensor([EOS]), ids[GEN_START:]]),
                              ids[[i for i in range(len(IDS)) if i not in (2, 3, 4)]]]):
        g = len(IDS) - GEN_START
        with torch.no_grad():
            lp = torch.log_softmax(llama(seq[None]).logits[0, -g - 1:-1].double(), -1)
        np.testing.assert_allclose(row, lp.gather(-1, ids[GEN_START:, None])[:, 0].numpy(), atol=1e-5)
