"""The set-free scorers: LDS by hand and against the context-cite package's own ablation passes, top-k drop against
brute-force deletions, and the shared ablation store (one set of forward passes per example for every method and
both scorers, kept in the job dir for a rerun)."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ctxbench.metrics import source_ablation
from ctxbench.metrics.lds import LDSScorer, lds, spearman
from ctxbench.metrics.source_ablation import AblationStore
from ctxbench.metrics.topk import TopKDropScorer, per_token, target_tokens, top_sources

from helpers.tiny_models import GEN_START, IDS, PROMPT_UNITS, SentenceTokenizer, make_input, tiny_model


def test_lds_by_hand():
    masks = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=bool)
    # predicted: 2, -1, 1, 0.5 -> ranks 4 1 3 2; targets ranks 3 1 4 2; d = 1 0 -1 0
    got = lds(masks, [-1.0, -3.0, -0.5, -2.0], [2.0, -1.0, 0.5])
    assert got == pytest.approx(1 - 6 * 2 / (4 * (16 - 1)))
    assert lds(masks, [-1.0, -1.0, -1.0, -1.0], [2.0, -1.0, 0.5]) is None  # a constant target
    assert lds(masks, [-1.0, -3.0, -0.5, -2.0], [0.0, 0.0, 0.0]) is None  # a constant prediction
    # ties take average ranks: x = 1 1 2, y = 1 2 3 -> ranks 1.5 1.5 3 vs 1 2 3
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(np.corrcoef([1.5, 1.5, 3], [1, 2, 3])[0, 1])


def test_top_sources_ties_go_to_the_earlier():
    assert top_sources([0.5, 2.0, 0.5, 2.0], 3).tolist() == [1, 3, 0]


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def _prepared(mi, sink=(0, 3), eid="ex"):
    return SimpleNamespace(model_input=mi, sink_span=list(sink), example=SimpleNamespace(example_id=eid))


def _brute_logp(model, ids, gone, gen_start, rows):
    """log p of the generated tokens ``rows`` with the positions ``gone`` deleted: one unpadded forward pass."""
    keep = [i for i in range(len(ids)) if i not in set(gone)]
    seq = torch.tensor([ids[i] for i in keep])
    start = gen_start - len([g for g in gone if g < gen_start])
    with torch.no_grad():
        logp = torch.log_softmax(model(seq[None]).logits[0].double(), -1)
    return float(sum(logp[start + t - 1, seq[start + t]] for t in rows))


def _dropped(kept, template=2):
    return [template + p for j, k in enumerate(kept) if not k for p in PROMPT_UNITS[j]]


def test_lds_and_topk_against_brute_force_deletions(llama, tmp_path):
    mi = make_input(ids=torch.tensor(IDS), gen_start=GEN_START, template=2)
    prep, tok = _prepared(mi), SentenceTokenizer()
    w = np.array([0.1, 0.9, 0.2, -0.3, 0.0, 0.4, 0.1, 2.0, -1.0])  # sources sum to 1.2, 0.2, 1.0
    weights = {"seq": w, "row": w[::-1].copy()}  # row: sums 1.2, 0.2, 1.0 reversed onto the tokens
    lds_sc = LDSScorer(n_masks=12, seed=3, batch_size=5)
    lds_sc.use_job_dir(tmp_path)
    rec = lds_sc.score(llama, tok, prep, None, weights)
    G = len(IDS) - GEN_START
    targets = {"seq": range(G), "row": range(0, 4)}
    ab = lds_sc.store.for_example(llama, tok, prep)
    masks = np.array([[c == "1" for c in b] for b in ab.masks["seed=3,n=12,keep_prob=0.5"]])
    assert masks.shape == (12, 3)
    for view, ww in weights.items():
        brute = [_brute_logp(llama, IDS, _dropped(m), GEN_START, targets[view]) for m in masks]
        np.testing.assert_allclose([ab.target(m, view) for m in masks], brute, rtol=1e-5, atol=1e-5)
        scores = [ww[2 + np.array(u) - 2].sum() for u in PROMPT_UNITS]
        assert rec["lds"][view]["lds"] == pytest.approx(lds(masks, brute, scores), abs=1e-9)
    distinct = len({m.tobytes() for m in masks})
    assert rec["lds_info"] == {"sources": 3, "masks": 12, "run": distinct, "reused": 0}  # distinct subsets
    # top-k: drop the k best sources by hand; k = 5 exceeds the 3 sources
    tk = TopKDropScorer(ks=[1, 2, 5], batch_size=2)
    tk.use_job_dir(tmp_path)
    got = tk.score(llama, tok, prep, None, weights)
    for view, ww in weights.items():
        order = np.argsort([-ww[np.array(u)].sum() for u in PROMPT_UNITS], kind="stable")
        full = _brute_logp(llama, IDS, [], GEN_START, targets[view])
        for k in (1, 2):
            kept = [j not in order[:k] for j in range(3)]
            # nats per target token: the summed drop over the target's token count
            want = (full - _brute_logp(llama, IDS, _dropped(kept), GEN_START, targets[view])) / len(targets[view])
            assert got["topk"][view][f"drop@{k}"] == pytest.approx(want, rel=1e-5, abs=1e-5)
        assert got["topk"][view]["drop@5"] is None and got["topk"][view]["tokens"] == len(targets[view])
    # the ablations are kept on disk: a rerun (a fresh store on the same folder) runs no forward pass
    source_ablation._STORE = None  # a rerun: a fresh process
    again_lds, again_tk = LDSScorer(n_masks=12, seed=3), TopKDropScorer(ks=[1, 2, 5])
    for sc in (again_lds, again_tk):
        sc.use_job_dir(tmp_path)

    def no_passes(*a, **k):
        raise AssertionError("a forward pass ran on a rerun")

    orig = source_ablation.deleted_token_logprobs
    source_ablation.deleted_token_logprobs = no_passes
    try:
        assert again_lds.score(llama, tok, prep, None, weights)["lds"] == rec["lds"]
        assert again_tk.score(llama, tok, prep, None, weights)["topk"] == got["topk"]
    finally:
        source_ablation.deleted_token_logprobs = orig
    assert len(list((tmp_path / "ablations").glob("ex-*.json"))) == 1


def test_every_method_of_an_example_shares_one_set_of_passes(llama, tmp_path):
    mi = make_input(ids=torch.tensor(IDS), gen_start=GEN_START, template=2)
    prep, tok = _prepared(mi), SentenceTokenizer()
    sc = LDSScorer(n_masks=16, seed=0)
    sc.use_job_dir(tmp_path)
    first = sc.score(llama, tok, prep, None, {"seq": np.arange(9.0)})["lds_info"]
    second = sc.score(llama, tok, prep, None, {"seq": -np.arange(9.0)})["lds_info"]
    assert first["run"] > 0 and second["run"] == 0 and second["reused"] == first["run"] + first["reused"]
    # another seed draws other masks for the same example, and the file records both draws
    other = LDSScorer(n_masks=16, seed=1)
    other.use_job_dir(tmp_path)
    other.score(llama, tok, prep, None, {"seq": np.arange(9.0)})
    ab = sc.store.for_example(llama, tok, prep)
    assert set(ab.masks) == {"seed=0,n=16,keep_prob=0.5", "seed=1,n=16,keep_prob=0.5"}


def test_fewer_than_two_sources_have_no_lds(llama):
    ids = torch.tensor([1, 2, 10, 11, 12, 9, 20, 21, 22, 63])  # one prompt sentence
    mi = make_input(ids=ids, gen_start=6, template=2)
    out = LDSScorer(n_masks=4).score(llama, SentenceTokenizer(), _prepared(mi, (0, 2)), None, {"seq": np.ones(3)})
    assert out["lds"] is None and out["lds_info"]["sources"] == 1


def test_lds_equals_the_spearman_of_the_context_cite_package_s_targets(monkeypatch, smol_tokenizer):
    """The package has no LDS function (context-cite 0.0.4): its LDS is the Spearman correlation of its ablated
    targets with the attribution's predictions, over its own seeded masks. Our scorer on the package's masks gives
    the Spearman correlation of the package's targets."""
    from context_cite import utils as ccu

    from ctxbench.attribution.base import InputContext
    from ctxbench.attribution.perturbation import SentenceUnits
    from ctxbench.prompts.formats import build_model_input

    from helpers.context_cite_package import package_logit_probs
    from helpers.tiny_models import random_llama

    from test_context_cite import STORY

    tok = smol_tokenizer
    model = random_llama(len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         intermediate_size=64, seed=5)
    mi = build_model_input(tok, STORY, "She lives in Orrick.", "table1")
    units = SentenceUnits.of(tok, InputContext.from_model_input(model, mi))
    dropped = [[int(p) for p in mi.prompt_positions[cols]] for cols in units.prompt]
    masks, logit_probs = package_logit_probs(monkeypatch, model, tok, mi, dropped, n_masks=32)
    theirs_target = ccu.aggregate_logit_probs(logit_probs, "log_prob")
    w = np.random.default_rng(0).normal(size=mi.P)
    scores = np.array([w[cols].sum() for cols in units.prompt])
    theirs = spearman(theirs_target, masks.astype(float) @ scores)
    monkeypatch.setattr(AblationStore, "masks", lambda self, prepared, ab, seed, n, p: masks)
    ours = LDSScorer(n_masks=32).score(model, tok, _prepared(mi, (0, mi.G - 1)), None, {"seq": w})
    assert ours["lds"]["seq"]["lds"] == pytest.approx(theirs, abs=1e-9)
    assert abs(theirs) > 0.1  # a figure, not a degenerate zero


@pytest.mark.slow
def test_lds_and_topk_in_a_run_of_the_real_model(tmp_path):
    """run_exp with mode=[lds,topk] on SmolLM2: one set of mask passes per example for every method, the file in the
    job dir."""
    import json

    from ctxbench.stages.run import run_stage

    from helpers.configs import run_cfg

    cfg = run_cfg(tmp_path, "dataset.num_samples=1", "attribution=[copy_match,random]", "mode=[lds,topk]",
                  "mode.lds.n_masks=8", "views=[row]")
    summary = run_stage(cfg, tmp_path / "job")
    recs = [json.loads(x) for x in (tmp_path / "job" / "results.jsonl").read_text().splitlines()]
    first, second = recs
    # the second method runs no mask again, and of its top-k removals only those the first did not make
    assert first["lds_info"]["run"] > 0 and second["lds_info"]["run"] == 0
    assert second["topk_info"]["reused"] >= 1 and second["topk_info"]["run"] <= 3
    assert summary["copy_match"]["lds"]["row"]["lds"]["n"] == 1
    assert summary["copy_match"]["topk"]["row"]["drop@1"]["mean"] is not None
    assert len(list((tmp_path / "job" / "ablations").glob("*.json"))) == 1


def test_the_lds_masks_are_held_out_from_context_cite_s(llama):
    """ContextCite with the run's seed draws its ablations from the same seed: the LDS masks come from another
    stream, so ContextCite is not scored on the ablations it was fitted on."""
    from ctxbench.attribution.context_cite import ablation_masks, example_rng

    mi = make_input(ids=torch.tensor(IDS), gen_start=GEN_START, template=2)
    prep = _prepared(mi)
    store = AblationStore()
    ab = store.for_example(llama, SentenceTokenizer(), prep)
    ours = store.masks(prep, ab, 0, 32, 0.5)
    theirs = ablation_masks(example_rng(0, mi.input_ids.numpy()), 32, 3, 0.5)
    assert not np.array_equal(ours, theirs)
    assert np.array_equal(ours, store.masks(prep, ab, 0, 32, 0.5))  # and the draw is the same every time


def test_a_summed_drop_written_before_the_per_token_unit_is_read_per_token():
    """A results line from before Drop@k was per token (no ``tokens`` in its view records) is read divided by its
    target's token count: the sink span's for the row view, every generated token's for the seq view."""
    old = {"example_id": "e", "method": "m", "G": 40, "sink_span": [23, 38],
           "topk": {"row": {"drop@1": 8.0, "drop@3": None}, "seq": {"drop@1": 20.0, "drop@3": 40.0}}}
    new = {"example_id": "f", "method": "m", "G": 10, "sink_span": None,
           "topk": {"row": {"drop@1": 0.5, "drop@3": 0.25, "tokens": 10}}}
    assert target_tokens("row", 40, [23, 38]) == 16 and target_tokens("seq", 40, [23, 38]) == 40
    assert target_tokens("row", 10, None) == 10
    got = TopKDropScorer(ks=[1, 3]).example_values([old, new], ["row", "seq"])
    assert got["row"]["drop@1"] == {"e": 0.5, "f": 0.5} and got["row"]["drop@3"] == {"f": 0.25}
    assert got["seq"]["drop@1"] == {"e": 0.5} and got["seq"]["drop@3"] == {"e": 1.0}
    assert per_token(new) is new and old["topk"]["row"]["drop@1"] == 8.0  # nothing changed in place
    assert [m.label for m in TopKDropScorer(ks=[1]).metrics()] == ["Drop@1 (nats/token)"]


def test_random_and_length_score_sources_by_their_own_rule(llama, tmp_path):
    """Through the scorers: a result's source rule (``AttributionResult.source_scores``) replaces the summed token
    weights: random's one draw per source, length's token counts (PROMPT_UNITS: 3, 4 and 2 tokens)."""
    from ctxbench.attribution.baselines import RandomAttributor
    from ctxbench.attribution.controls import LengthAttributor
    from ctxbench.evaluation import view_weights

    mi = make_input(ids=torch.tensor(IDS), gen_start=GEN_START, template=2)
    prep, tok = _prepared(mi), SentenceTokenizer()
    lds_sc, tk = LDSScorer(n_masks=12, seed=3), TopKDropScorer(ks=[1])
    for sc in (lds_sc, tk):
        sc.use_job_dir(tmp_path)
    for att in (RandomAttributor(seed=1), LengthAttributor()):
        res = att.attribute(None, tok, mi, sink_span=(0, 3))
        weights = view_weights(res, (0, 3), ["seq", "row"])
        rec = lds_sc.score(llama, tok, prep, res, weights)
        got = tk.score(llama, tok, prep, res, weights)
        ab = lds_sc.store.for_example(llama, tok, prep)
        own = res.source_scores(ab.sources)
        if att.name == "length":
            np.testing.assert_array_equal(own, [3, 4, 2])
        masks = np.array([[c == "1" for c in b] for b in ab.masks["seed=3,n=12,keep_prob=0.5"]])
        first = top_sources(own, 1)
        kept = np.array([j not in first for j in range(3)])
        for view, w in weights.items():
            targets = [ab.target(m, view) for m in masks]
            assert rec["lds"][view]["lds"] == pytest.approx(lds(masks, targets, own), abs=1e-12)
            drop = (ab.target(np.ones(3, dtype=bool), view) - ab.target(kept, view))
            assert got["topk"][view]["drop@1"] == pytest.approx(drop / got["topk"][view].get("tokens", 1), abs=1e-9)
    # a result without a rule is scored by the sum, as before
    w = np.arange(9.0)
    np.testing.assert_array_equal(ab.source_scores(w), [w[u].sum() for u in PROMPT_UNITS])
