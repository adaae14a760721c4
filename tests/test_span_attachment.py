"""Span attachment: target = thinking + newline + answer, sink = the answer's tokens (SmolLM2's tokenizer), and
run_exp's example_spans keeps the cached spans for that tokenizer and redoes them from the character span for another
one."""

import pytest

from ctxbench.evaluation import example_spans
from ctxbench.example import CachedExample, ExampleStore, read_examples, validate_example
from ctxbench.sampling import attach_spans, split_boxed_generation
from ctxbench.utils.spans import tokenizer_name


def raw_row(**md):
    return CachedExample(prompt="Context about Paris.\nWhat is the capital of France?",
                         metadata={"id": "q1", "answer": "Paris", "reference_answer": "Paris", **md})


def word_tokenizer():
    """A different tokenizer: lower-cased words and punctuation runs, one id each."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = "the capital of france is paris so answer we know that city in [UNK]".split()
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")


def test_sink_tokens_decode_to_the_answer(smol_tokenizer):
    gen = "We know that Paris is the capital of France.\nSo \\box{The capital of France is Paris.}"
    split = split_boxed_generation(gen)
    ex = attach_spans(raw_row(), split.thinking, split.answer, smol_tokenizer, judge_response="True (contains)")
    assert ex.target == split.thinking + "\n" + split.answer
    ids = smol_tokenizer(ex.target, add_special_tokens=False)["input_ids"]
    s, e = ex.sink_span
    assert smol_tokenizer.decode(ids[s:e + 1]).strip() == "The capital of France is Paris."
    assert e == len(ids) - 1 and ex.thinking_span == [0, s - 1] and ex.indices_to_explain == ex.sink_span
    assert smol_tokenizer.decode(ids[:s]).strip() == split.thinking
    md = ex.metadata
    assert md["boxed_answer"] == split.answer and md["judge_response"] == "True (contains)"
    assert md["reference_answer"] == "Paris" and md["id"] == "q1" and md["answer"] == "Paris"
    assert ex.target[md["sink_char_span"][0]:md["sink_char_span"][1]] == split.answer
    assert md["span_tokenizer"] == tokenizer_name(smol_tokenizer)
    assert ex.prompt == raw_row().prompt
    validate_example(ex.to_dict(), n_target_tokens=len(ids))


def test_last_occurrence_of_the_answer_is_the_sink(smol_tokenizer):
    # the answer string also appears in the chain of thought: the sink is the final one
    ex = attach_spans(raw_row(), "Paris? Paris is the city.", "Paris", smol_tokenizer)
    ids = smol_tokenizer(ex.target, add_special_tokens=False)["input_ids"]
    s, e = ex.sink_span
    assert ex.metadata["sink_char_span"] == [len("Paris? Paris is the city.") + 1, len(ex.target)]
    assert smol_tokenizer.decode(ids[s:e + 1]).strip() == "Paris" and e == len(ids) - 1 and s > 3


def test_reference_answer_kept_or_given(smol_tokenizer):
    row = CachedExample(prompt="p", metadata={"id": 3, "answer": "x"})
    ex = attach_spans(row, "think", "x", smol_tokenizer)
    assert ex.metadata["reference_answer"] == "x"
    ex = attach_spans(row, "think", "x", smol_tokenizer, reference_answer="y")
    assert ex.metadata["reference_answer"] == "y"
    with pytest.raises(ValueError, match="empty"):
        attach_spans(row, "think", "", smol_tokenizer)


def test_no_token_overlapping_the_answer_is_none():
    class Blind:  # a tokenizer whose tokens are all zero-width: nothing overlaps the answer
        name_or_path = "blind"

        def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
            return {"input_ids": [0, 1], "offset_mapping": [(0, 0), (0, 0)]}

    assert attach_spans(raw_row(), "think", "Paris", Blind()) is None


def test_run_exp_reads_the_spans_back(smol_tokenizer, tmp_path):
    ex = attach_spans(raw_row(), "We know that Paris is the capital of France.", "So the answer is Paris",
                      smol_tokenizer, judge_response="True")
    # the same tokenizer: the cached spans
    sink, think, origin = example_spans(ex, smol_tokenizer)
    assert (sink, think, origin) == (ex.sink_span, ex.thinking_span, "cached")
    # another tokenizer: recomputed from the character span, in its own coordinates
    other = word_tokenizer()
    sink2, think2, origin2 = example_spans(ex, other)
    ids = other(ex.target, add_special_tokens=False)["input_ids"]
    n = len(ids)
    assert origin2 == "recomputed" and n < len(smol_tokenizer(ex.target, add_special_tokens=False)["input_ids"])
    assert sink2 == [n - 5, n - 1] and think2 == [0, n - 6]
    assert other.decode(ids[sink2[0]:sink2[1] + 1]) == "so the answer is paris"
    # the cache line round-trips through the store and the strict reader (spans checked against the tokenizer)
    store = ExampleStore(tmp_path / "c.jsonl")
    assert store.add(ex)
    assert list(read_examples(tmp_path / "c.jsonl", smol_tokenizer)) == [ex]
