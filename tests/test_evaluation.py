"""One example through run_exp's evaluation: spans, the prompt-coordinate shift of evidence, scorers and refusals."""

import numpy as np
import pytest

from ctxbench.attribution import AttributionResult
from ctxbench.datasets.ruler import ruler_example
from ctxbench.core.errors import ExampleRefused
from ctxbench.evaluation import VIEW_NAMES, example_spans, prepare_example, view_weights
from ctxbench.example import CachedExample
from ctxbench.metrics.coverage import CoverageScorer
from ctxbench.metrics.faithfulness import FaithfulnessScorer
from ctxbench.metrics.recovery import RecoveryScorer

NEEDLE = "One of the special magic numbers for quiet-river is: 4817263."
INPUT = ("Some special magic numbers are hidden within the following text.\nThe grass is green. The sky is blue.\n"
         + NEEDLE + "\nThe sun is yellow. Here we go.\nWhat are all the special magic numbers for quiet-river?")


def ruler_line():
    s = INPUT.index(NEEDLE)
    return {"index": 3, "input": INPUT, "outputs": ["4817263"], "answer_prefix": " Answer:",
            "needle_spans": [{"span": [s, s + len(NEEDLE)], "sentence": NEEDLE}]}


@pytest.mark.parametrize("fmt", ["table1", "bare"])
def test_gold_tokens_are_the_needle_in_both_formats(smol_tokenizer, fmt):
    tok = smol_tokenizer
    ex = ruler_example(ruler_line(), task="t", tokenizer=tok)
    prepared = prepare_example(ex, tok, fmt)
    mi = prepared.model_input
    ids = mi.input_ids.tolist()
    gold_text = tok.decode([ids[int(mi.prompt_positions[g])] for g in prepared.evidence_tokens])
    # By construction the gold tokens are exactly the needle sentence (a token may carry the separator before it).
    assert gold_text.strip() == NEEDLE
    before = prepared.evidence_tokens[0] - 1
    assert tok.decode([ids[int(mi.prompt_positions[before])]]).strip() in ("blue.", ".", "\n", "")
    assert prepared.sink_span == ex.sink_span and prepared.notes["spans"] == "cached"


def fake_result(P, G, prompt_weights):
    A = np.full((G, P + G), np.nan, dtype=np.float32)
    A[:, :P] = prompt_weights
    A[:, P:] = 0.0
    return AttributionResult(matrix=A, method="fake", P=P, G=G)


def score(scorer, tok, prepared, result):
    return scorer.score(None, tok, prepared, result, view_weights(result, prepared.sink_span, VIEW_NAMES))


def test_recovery_scores_known_top_k(smol_tokenizer):
    tok = smol_tokenizer
    prepared = prepare_example(ruler_example(ruler_line(), task="t", tokenizer=tok), tok, "table1")
    P, G, gold = prepared.model_input.P, prepared.model_input.G, prepared.evidence_tokens
    k = max(1, int(np.ceil(0.1 * P)))
    modes = RecoveryScorer(fraction=0.1)
    w = np.zeros(P)
    w[gold] = 1.0  # all mass on the evidence: every gold token in the top k when k >= |gold|
    out = score(modes, tok, prepared, fake_result(P, G, w))
    expected = min(k, len(gold)) / len(gold)
    assert out["recovery"] == {"seq": expected, "row": expected, "rec": expected}
    w = np.ones(P)
    w[gold] = 0.0  # no mass on the evidence: ties broken by position, the first k non-gold... none is gold
    w[: gold[0]] = 2.0
    out = score(modes, tok, prepared, fake_result(P, G, w))
    assert gold[0] >= k and out["recovery"]["seq"] == 0.0


def test_spans_recomputed_for_another_tokenizer(smol_tokenizer):
    tok = smol_tokenizer
    ex = ruler_example(ruler_line(), task="t", tokenizer=tok)
    stale = CachedExample(**{**ex.to_dict(), "sink_span": [0, 0], "indices_to_explain": [0, 0],
                             "metadata": {**ex.metadata, "span_tokenizer": "some/other-tokenizer"}})
    sink, think, origin = example_spans(stale, tok)
    assert (sink, think, origin) == (ex.sink_span, None, "recomputed")
    md = {k: v for k, v in stale.metadata.items() if k != "sink_char_span"}
    with pytest.raises(ExampleRefused, match="no character span"):
        example_spans(CachedExample(**{**stale.to_dict(), "metadata": md}), tok)
    # A sampled cache: the boxed answer's last occurrence gives the span.
    sampled = CachedExample(prompt="p", target="It is 7. So the answer is 7.\nThe answer is 7.", sink_span=None,
                            metadata={"id": "s", "boxed_answer": "The answer is 7."})
    sink, think, origin = example_spans(sampled, tok)
    ids = tok(sampled.target, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids[sink[0]:sink[1] + 1]).strip() == "The answer is 7."
    assert think is None and origin == "recomputed"


def test_refusals(smol_tokenizer):
    raw = CachedExample(prompt="p", target=None, metadata={"id": "m"})
    with pytest.raises(ExampleRefused, match="sample_and_filter"):
        prepare_example(raw, smol_tokenizer, "table1")
    no_spans = [CachedExample(prompt="p", target="t", metadata={"id": "m"})]
    with pytest.raises(ExampleRefused, match="mode recovery needs evidence spans"):
        RecoveryScorer().check(no_spans, "morehopqa")
    with pytest.raises(ExampleRefused, match="mode coverage needs gold sentence"):
        CoverageScorer().check(no_spans, "morehopqa")
    FaithfulnessScorer().check(no_spans, "morehopqa")


def test_scorers_describe_their_metrics():
    """Labels come from the parameters; directions from the metric's meaning."""
    assert [(m.label, m.higher_is_better) for m in RecoveryScorer(fraction=0.05).metrics()] == [("Recall@5%", True)]
    assert [(m.label, m.higher_is_better) for m in FaithfulnessScorer().metrics()] == [
        ("RISE", False), ("MAS", False), ("RISE+AP", False), ("RISE@all", False), ("MAS@all", False),
        ("RISE@nonstop", False), ("MAS@nonstop", False)]
    with pytest.raises(ValueError, match="fraction"):
        RecoveryScorer(fraction=1.5)
    with pytest.raises(ValueError, match="steps"):
        FaithfulnessScorer(steps=0)


def test_coverage_of_the_needle_sentence(smol_tokenizer):
    tok = smol_tokenizer
    prepared = prepare_example(ruler_example(ruler_line(), task="t", tokenizer=tok), tok, "table1")
    P, G, gold = prepared.model_input.P, prepared.model_input.G, prepared.evidence_tokens
    assert prepared.example.attr_mask_indices == [3]  # intro | grass | sky | needle | ...
    modes = CoverageScorer()
    w = np.zeros(P)
    w[gold] = 1.0  # all mass on the one gold sentence: ratio 1 = E, inside (E/2, 3E/2), above E/2, not above E
    out = score(modes, tok, prepared, fake_result(P, G, w))
    assert out["coverage"]["seq"] == {"within": 1.0, "above_half": 1.0, "above_mean": 0.0}
    w = np.ones(P)
    w[gold] = 0.0
    out = score(modes, tok, prepared, fake_result(P, G, w))
    assert out["coverage"]["rec"] == {"within": 0.0, "above_half": 0.0, "above_mean": 0.0}
