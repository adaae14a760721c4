"""generator=evidence_cot: the labelled synthetic chain of thought of the offline two-stage Table 1. On every RULER
family the cached target's spans are exact: the sink is the boxed answer sentence's tokens, the thinking span every
token before it, and the thinking text is the evidence sentences in context order."""

from __future__ import annotations

import pytest

from ctxbench.datasets import Paths, RulerTask
from ctxbench.core.errors import ExampleRefused
from ctxbench.example import CachedExample
from ctxbench.generators.base import GenerationRequest
from ctxbench.generators.evidence_cot import EvidenceCoTGenerator, answer_sentence
from ctxbench.sampling.attach import attach_spans
from ctxbench.boxed import split_boxed_generation
from ctxbench.sampling.judges import JudgeItem, RuleJudge

FAMILIES = ["niah_single_1", "niah_multikey_2", "niah_mq_q2", "niah_mv_v2", "vt_h2_c3", "hotpotqa_long"]


@pytest.fixture(scope="module")
def rows_by_task(tmp_path_factory, smol_tokenizer):
    data = tmp_path_factory.mktemp("data")
    return {t: RulerTask(name=t, length=512, num_samples=3).load(Paths(data_dir=str(data)), smol_tokenizer)[1]
            for t in FAMILIES}


@pytest.mark.parametrize("task", FAMILIES)
def test_spans_are_exact_on_every_ruler_family(task, rows_by_task, smol_tokenizer):
    gen = EvidenceCoTGenerator()
    rows = rows_by_task[task]
    gen.check(rows, task)
    outs = gen.generate([GenerationRequest(r.example_id, row=r) for r in rows])
    for row, g in zip(rows, outs):
        assert g.ok, g.error
        split = split_boxed_generation(g.text)
        assert split.ok, split
        md = row.metadata
        # the evidence, restated in the order it appears in the context, then the gold answer sentence
        evidence = [row.prompt[s:e].strip() for s, e in sorted(tuple(n["span"]) for n in md["needle_spans"])]
        assert split.thinking == "\n".join(evidence)
        assert split.answer == answer_sentence(md["answer_prefix"], md["outputs"])
        assert all(o in split.answer for o in md["outputs"])
        verdict = RuleJudge().judge([JudgeItem(split.answer, md["reference_answer"])])[0]
        assert verdict.correct, verdict
        kept = attach_spans(row, split.thinking, split.answer, smol_tokenizer)
        assert kept.target == split.thinking + "\n" + split.answer
        enc = smol_tokenizer(kept.target, add_special_tokens=False, return_offsets_mapping=True)
        s, e = kept.sink_span
        # sink = exactly the answer sentence's tokens (it starts after the line break: a token boundary)
        start = len(split.thinking) + 1
        first = enc["offset_mapping"][s]
        assert first[0] <= start < first[1] or first[0] == start
        assert enc["offset_mapping"][e][1] == len(kept.target) and e == len(enc["input_ids"]) - 1
        assert smol_tokenizer.decode(enc["input_ids"][s:e + 1]).strip() == split.answer
        assert kept.thinking_span == [0, s - 1] and kept.indices_to_explain == [s, e]
        assert "\n".join(evidence) in smol_tokenizer.decode(enc["input_ids"][:s])


def test_refusals():
    gen = EvidenceCoTGenerator()
    bare = CachedExample(prompt="Who wrote it?", metadata={"id": "q1", "outputs": ["Ann"]})
    with pytest.raises(ExampleRefused, match="needle_spans"):
        gen.check([bare], "morehopqa")  # a dataset without evidence spans is refused before any work
    out = gen.generate([GenerationRequest("q1", row=bare), GenerationRequest("q2")])
    assert out[0].error == "evidence_cot: example 'q1' has no evidence spans (metadata.needle_spans)"
    assert out[1].error == "evidence_cot: the request carries no dataset row"
    no_answer = CachedExample(prompt="a b.", metadata={"id": "q3", "needle_spans": [{"span": [0, 4]}]})
    assert "no answer" in gen.generate([GenerationRequest("q3", row=no_answer)])[0].error


def test_answer_sentence():
    assert answer_sentence(" The numbers are", ["1", "2"]) == "The numbers are 1, 2."
    assert answer_sentence(" Answer: they are: ", ["A", "B"]) == "Answer: they are: A, B."
    assert answer_sentence("", ["Paris."]) == "Paris."
