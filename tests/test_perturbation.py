"""perturbation: sentence ablation scores against an unbatched hand loop, batch-size invariance, the KL variant against
numpy, causality, and the sentence units."""

import numpy as np
import pytest
import torch

from ctxbench.attribution.base import InputContext, causal_column_mask
from ctxbench.attribution.perturbation import PerturbationAttributor, SentenceUnits, token_sentences

# the toy input in sentences: template (2) | prompt: 3 sentences | one template token | generation: 3 sentences + EOS
from helpers.tiny_models import EOS, GEN_START, GEN_UNITS, IDS, PROMPT_UNITS, SentenceTokenizer, make_input, tiny_model


@pytest.fixture(scope="module")
def setup():
    model = tiny_model("llama")
    mi = make_input(ids=torch.tensor(IDS), gen_start=GEN_START, template=2)
    return model, mi, InputContext.from_model_input(model, mi)


def hand_logits(model, ids) -> torch.Tensor:
    """float64 logits at the positions predicting the generated tokens, one plain eager pass."""
    with torch.no_grad():
        return model(torch.as_tensor(ids)[None]).logits[0, GEN_START - 1:-1].double()


def hand_token_logprobs(model, ids) -> np.ndarray:
    lp = torch.log_softmax(hand_logits(model, ids), -1)
    return lp.gather(-1, torch.tensor(IDS[GEN_START:])[:, None])[:, 0].numpy()


def sources(ctx):
    """(absolute positions, matrix columns, first generated sentence it may explain) of every source unit."""
    pp = ctx.prompt_positions.tolist()
    out = [([pp[i] for i in u], u, 0) for u in PROMPT_UNITS]
    out += [([GEN_START + i for i in u], [ctx.P + i for i in u], g + 1) for g, u in enumerate(GEN_UNITS[:-1])]
    return out


def ablated(ids, positions):
    ids = list(ids)
    for p in positions:
        ids[p] = EOS
    return ids


def test_units_of_the_test_input(setup):
    _, _, ctx = setup
    units = SentenceUnits.of(SentenceTokenizer(), ctx)
    assert [u.tolist() for u in units.prompt] == PROMPT_UNITS
    assert [u.tolist() for u in units.generated] == GEN_UNITS


def test_scores_equal_an_unbatched_hand_loop(setup):
    model, mi, ctx = setup
    res = PerturbationAttributor(batch_size=2).attribute(model, SentenceTokenizer(), mi)
    A = res.matrix
    assert A.shape == (ctx.G, ctx.P + ctx.G) and res.P == ctx.P and res.G == ctx.G
    full = hand_token_logprobs(model, IDS)
    for positions, cols, first in sources(ctx):
        drop = full - hand_token_logprobs(model, ablated(IDS, positions))
        for g in range(first, len(GEN_UNITS)):
            rows = GEN_UNITS[g]
            # every token of the source sentence carries the score (spread "copy")
            np.testing.assert_allclose(A[np.ix_(rows, cols)], np.repeat(drop[rows, None], len(cols), 1), atol=1e-5)
            # the generated sentence's log-probability change is the sum of its rows
            assert abs(A[rows, cols[0]].sum() - drop[rows].sum()) < 1e-5
    assert res.info == {"prompt_sentences": 3, "generated_sentences": 4, "ablations": 6}
    assert np.abs(A).max() > 1e-3  # the random model does react to ablations


def test_share_divides_among_the_source_tokens(setup):
    model, mi, ctx = setup
    copy = PerturbationAttributor().attribute(model, SentenceTokenizer(), mi).matrix
    share = PerturbationAttributor(spread="share").attribute(model, SentenceTokenizer(), mi).matrix
    for _, cols, _ in sources(ctx):
        np.testing.assert_allclose(share[:, cols], copy[:, cols] / len(cols), atol=1e-7)


def test_batch_size_does_not_change_results(setup):
    model, mi, _ = setup
    ref = PerturbationAttributor(batch_size=1).attribute(model, SentenceTokenizer(), mi).matrix
    for bs in (2, 5, 64):
        np.testing.assert_allclose(PerturbationAttributor(batch_size=bs).attribute(model, SentenceTokenizer(), mi)
                                   .matrix, ref, atol=1e-6)


def test_kl_variant_against_numpy(setup):
    model, mi, ctx = setup
    A = PerturbationAttributor(objective="kl", batch_size=3).attribute(model, SentenceTokenizer(), mi).matrix

    def probs(ids):
        z = hand_logits(model, ids).numpy()
        z = z - z.max(-1, keepdims=True)
        return np.exp(z) / np.exp(z).sum(-1, keepdims=True)

    p = probs(IDS)
    for positions, cols, first in sources(ctx):
        q = probs(ablated(IDS, positions))
        kl = (p * (np.log(p) - np.log(q))).sum(-1)
        rows = [t for g in GEN_UNITS[first:] for t in g]
        np.testing.assert_allclose(A[np.ix_(rows, cols)], np.repeat(kl[rows, None], len(cols), 1), atol=1e-5)
        assert (kl[rows] >= 0).all()


def test_a_generated_sentence_gets_no_credit_from_itself_or_later(setup):
    model, mi, ctx = setup
    A = PerturbationAttributor().attribute(model, SentenceTokenizer(), mi).matrix
    assert not np.isnan(A).any()
    assert (A[~causal_column_mask(ctx.P, ctx.G)] == 0).all()
    for g, rows in enumerate(GEN_UNITS):
        later = [ctx.P + t for u in GEN_UNITS[g:] for t in u]
        assert (A[np.ix_(rows, later)] == 0).all()
        if g:  # earlier generated sentences do get credit
            earlier = [ctx.P + t for u in GEN_UNITS[:g] for t in u]
            assert np.abs(A[np.ix_(rows, earlier)]).max() > 0


class SentencePieceLike:
    """decode drops the word-initial space of the first token, as SentencePiece does; id 0 is a blank token."""

    WORDS = {0: "\n", 1: "▁The", 2: "▁cat", 3: "▁sat", 4: ".", 5: "▁It", 6: "▁ran", 7: "!"}

    def decode(self, ids):
        return "".join(self.WORDS[int(i)] for i in ids).replace("▁", " ").lstrip(" ")


def test_token_sentences_keep_spaces_and_cover_every_token_once():
    ids = [1, 2, 3, 4, 0, 5, 6, 7, 0]  # "The cat sat.\n It ran!\n"
    units = token_sentences(SentencePieceLike(), ids)
    assert [u.tolist() for u in units] == [[0, 1, 2, 3, 4], [5, 6, 7, 8]]  # blank tokens stay with the sentence before
    assert token_sentences(SentencePieceLike(), []) == []
    assert [u.tolist() for u in token_sentences(SentencePieceLike(), [0, 0])] == [[0, 1]]  # nothing but blanks


def test_units_from_decoded_tokens_match_the_prompt_text(smol_tokenizer, morehopqa_path):
    """With SmolLM2's tokenizer, the units found by decoding equal those from the true prompt: its sentence spans
    (split_sentences) and each token's characters in it (the model input's prompt offsets), on 20 MoreHopQA prompts."""
    import bisect
    import json

    from ctxbench.datasets.sentences import split_sentences
    from ctxbench.prompts.formats import build_model_input

    n_units = 0
    for row in json.loads(morehopqa_path.read_text())[:20]:
        prompt = " ".join("".join(s) for _, s in row["context"]) + "\n" + row["question"]
        mi = build_model_input(smol_tokenizer, prompt, "It is.\nAnswer", "table1")
        starts = [a for a, _ in split_sentences(prompt)]
        owner = []
        for a, b in mi.prompt_offsets:
            text = prompt[a:b]
            first = a + len(text) - len(text.lstrip()) if text.strip() else a
            owner.append(max(0, bisect.bisect_right(starts, first) - 1))
        owner = np.array(owner)
        expected = [np.flatnonzero(owner == u).tolist() for u in np.unique(owner)]
        units = token_sentences(smol_tokenizer, mi.input_ids[mi.prompt_positions].tolist())
        assert [u.tolist() for u in units] == expected
        n_units += len(units)
    assert n_units > 100  # many sentences were compared, not one per prompt


@pytest.mark.parametrize("kw,name", [({"objective": "loss"}, "objective"), ({"spread": "sum"}, "spread"),
                                     ({"batch_size": 0}, "batch_size")])
def test_bad_parameters_are_refused(kw, name):
    with pytest.raises(ValueError, match=name):
        PerturbationAttributor(**kw)


@pytest.mark.slow
def test_perturbation_and_context_cite_through_run_exp(tmp_path):
    """SmolLM2 on one generated niah_mq_q2 example at 512 tokens: both methods run in the stage, and their records,
    recall and ContextCite's ablation count and cross-validated R^2 reach results.jsonl and the summary. (Recovery only
    and 16 ablations: each ablation is a forward pass of ~400 tokens, about a second on this CPU.)"""
    import json

    from ctxbench.stages.run import RESULTS, run_stage
    from helpers.configs import run_cfg

    out = tmp_path / "job"
    cfg = run_cfg(tmp_path, "dataset.num_samples=1", "max_examples=1", "attribution=[perturbation,context_cite]",
                  "attribution.context_cite.n_ablations=16", "mode=[recovery]", "views=[seq]", "heatmaps=0")
    summary = run_stage(cfg, out)
    recs = {r["method"]: r for r in map(json.loads, (out / RESULTS).read_text().splitlines())}
    assert set(recs) == {"perturbation", "context_cite"} and set(summary) == set(recs)
    for method, rec in recs.items():
        assert 0 <= rec["recovery"]["seq"] <= 1 and summary[method]["examples"] == 1
        print(f"\n{method}: Recall@10% {rec['recovery']['seq']:.3f}, {rec['attribution_s']:.1f} s, "
              f"{rec['attribution_info']}")
    info = recs["context_cite"]["attribution_info"]
    assert info["ablations"] == 16 and info["cv_folds"] == 5 and np.isfinite(info["cv_r2"])
    assert info["sources"] == info["prompt_sentences"] > 5  # RULER rows mark no question: every sentence a source
    units = recs["perturbation"]["attribution_info"]
    assert units["prompt_sentences"] > 5 and units["ablations"] == units["prompt_sentences"] + \
        units["generated_sentences"] - 1
