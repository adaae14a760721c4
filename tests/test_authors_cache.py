"""Caches made elsewhere: rows in FlashTrace's exp/exp2/data format (spans in its own Qwen3 tokenizer, no
id, no span_tokenizer) load for any model, with spans redone from the boxed answer's characters and ids from positions.
"""

import json

import pytest

from ctxbench.datasets import CachedJsonl, Paths, RulerTask
from ctxbench.core.errors import DataError, ExampleRefused
from ctxbench.evaluation import example_spans, prepare_example
from ctxbench.example import CachedExample, ExampleStore, read_examples
from ctxbench.core.part import build
from ctxbench.sampling import attach_spans

from helpers.cli import run_script
from helpers.configs import compose_stage
from helpers.paths import CACHE_DIR
from helpers.records import write_jsonl

NEEDLES = ("One of the special magic numbers for quiet-river is: 4817263.",
           "One of the special magic numbers for quiet-river is: 9051726.")
INPUT = ("Some special magic numbers are hidden within the following text. Make sure to memorize it.\n"
         "The grass is green. The sky is blue.\n" + NEEDLES[0] + "\nThe sun is yellow. Here we go.\n" + NEEDLES[1]
         + "\nWhat are all the special magic numbers for quiet-river mentioned in the provided text?")
ANSWER_PREFIX = " The special magic numbers for quiet-river mentioned in the provided text are"
BOXED = "The special magic numbers for quiet-river are 4817263 and 9051726."
# the boxed sentence also occurs in the chain of thought: the sink is its last occurrence
THINKING = (f"Both needles name quiet-river. I could write: {BOXED} Let me check the text again: 4817263 comes "
            f"first, 9051726 second.")


def reference_row(thinking=THINKING, boxed=BOXED, sink=(20, 31)):
    """One line as FlashTrace's sample_and_filter.py writes it: target = thinking + newline + boxed answer, spans
    in FlashTrace's tokenizer (here deliberately wrong for ours), no id, no span_tokenizer, no sink_char_span."""
    needle_spans = [{"span": [INPUT.index(n), INPUT.index(n) + len(n)], "sentence": n} for n in NEEDLES]
    return {"prompt": INPUT + ANSWER_PREFIX, "target": thinking + "\n" + boxed, "indices_to_explain": list(sink),
            "attr_mask_indices": [2, 4], "sink_span": list(sink), "thinking_span": [0, sink[0] - 1],
            "metadata": {"dataset": "ruler", "length": 512, "length_w_model_temp": 540,
                         "outputs": ["4817263", "9051726"], "answer_prefix": ANSWER_PREFIX,
                         "token_position_answer": 31, "needle_spans": needle_spans, "prompt_sentence_count": 7,
                         "reference_answer": "4817263, 9051726", "judge_response": "True", "boxed_answer": boxed}}


SHORT = ("Two numbers.", "The numbers are 1 and 2.")


@pytest.fixture
def authors_file(tmp_path):
    # the second row's FlashTrace spans lie past the end of the target in SmolLM2's tokens
    return write_jsonl(tmp_path / "niah_mq_q2.jsonl",
                      [reference_row(), reference_row(*SHORT, sink=(120, 131))])


def hand_spans(tok, target, answer):
    """FlashTrace's rule, by hand: tokens overlapping the answer's last occurrence; thinking = everything before."""
    start = target.rfind(answer)
    end = start + len(answer)
    offsets = tok(target, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    hit = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]
    return [hit[0], hit[-1]], [0, hit[0] - 1]


def test_reference_rows_get_our_spans_and_ids(smol_tokenizer, authors_file, tmp_path):
    tok = smol_tokenizer
    source, examples = CachedJsonl(name="niah_mq_q2", path=str(authors_file)).load(Paths(samples_dir=str(tmp_path)),
                                                                                   tok)
    assert (source.kind, source.path) == ("cached", authors_file)
    assert [e.example_id for e in examples] == ["0", "1"] and [e.metadata["index"] for e in examples] == [0, 1]
    for ex, boxed in zip(examples, (BOXED, SHORT[1])):
        sink, think, origin = example_spans(ex, tok)
        assert (sink, think, origin) == (*hand_spans(tok, ex.target, boxed), "recomputed")
        ids = tok(ex.target, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids[sink[0]:sink[1] + 1]).strip() == boxed and sink[1] == len(ids) - 1
        assert sink != ex.sink_span  # FlashTrace's (wrong for this tokenizer) spans are not used
    # the sink is the boxed sentence after the chain of thought, not its copy inside it
    assert example_spans(examples[0], tok)[0][0] >= len(tok(THINKING, add_special_tokens=False)["input_ids"])
    # the evidence stays in prompt characters: recovery finds both needles
    prepared = prepare_example(examples[0], tok, "table1")
    mi = prepared.model_input
    gold = tok.decode([mi.input_ids.tolist()[int(mi.prompt_positions[g])] for g in prepared.evidence_tokens])
    assert all(n in gold for n in NEEDLES) and prepared.notes["spans"] == "recomputed"
    # the same file gives the same ids again (results are resumed by id)
    assert [e.example_id for e in read_examples(authors_file, tok)] == ["0", "1"]


def test_reference_file_copied_to_the_samples_dir(smol_tokenizer, authors_file, tmp_path):
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "niah_mq_q2.jsonl").write_bytes(authors_file.read_bytes())
    task = RulerTask(name="niah_mq_q2", generate_missing=False)
    source, examples = task.load(Paths(samples_dir=str(samples), data_dir=str(tmp_path / "none")), smol_tokenizer)
    assert source.kind == "cache" and [e.example_id for e in examples] == ["0", "1"]
    assert [example_spans(e, smol_tokenizer)[2] for e in examples] == ["recomputed", "recomputed"]


def test_answer_not_in_target_is_refused_with_its_line(smol_tokenizer, tmp_path):
    bad = reference_row()
    bad["metadata"]["boxed_answer"] = "The answer is 42."
    p = write_jsonl(tmp_path / "bad.jsonl", [reference_row(), bad])
    with pytest.raises(DataError) as err:
        list(read_examples(p, smol_tokenizer))
    assert str(err.value).startswith(f"{p}:2: field 'metadata.boxed_answer': ") and err.value.line == 2
    with pytest.raises(ExampleRefused, match="metadata.boxed_answer.*does not occur in the target"):
        example_spans(CachedExample(**{**bad, "metadata": {**bad["metadata"], "index": 1}}), smol_tokenizer)
    outside = reference_row()
    outside["metadata"]["sink_char_span"] = [5, 10_000]
    p = write_jsonl(tmp_path / "outside.jsonl", [outside])
    with pytest.raises(DataError, match=r"outside.jsonl:1: field 'metadata.sink_char_span'"):
        list(read_examples(p, smol_tokenizer))


def test_file_with_some_ids_is_refused(tmp_path):
    with_id = reference_row()
    with_id["metadata"]["id"] = "a"
    p = write_jsonl(tmp_path / "mixed.jsonl", [with_id, reference_row(), reference_row()])
    with pytest.raises(DataError, match=r"mixed.jsonl:2: field 'metadata.id': no metadata.id"):
        list(read_examples(p))


def test_rows_of_our_tokenizer_and_hand_made_rows_keep_their_spans(smol_tokenizer, tmp_path):
    tok = smol_tokenizer
    row = CachedExample(prompt=INPUT, metadata={"id": "q1"})
    ours = attach_spans(row, THINKING, BOXED, tok, judge_response="True")
    with ExampleStore(tmp_path / "ours.jsonl") as store:
        store.add(ours)
    [back] = read_examples(tmp_path / "ours.jsonl", tok)
    assert example_spans(back, tok) == (ours.sink_span, ours.thinking_span, "cached")
    # no tokenizer and no answer characters recorded: the spans are taken as they are
    hand = CachedExample(prompt="p", target="think\nans", sink_span=[2, 3], thinking_span=[0, 1], metadata={"id": "h"})
    assert example_spans(hand, tok) == ([2, 3], [0, 1], "cached")


def test_dataset_cached_composes_and_loads(smol_tokenizer, authors_file, tmp_path):
    cfg = compose_stage("run", "dataset=cached", f"dataset.path={authors_file}", "dataset.name=niah_mq_q2",
                        f"paths.root={tmp_path}")
    dataset = build(cfg.dataset, "dataset")
    assert dataset == CachedJsonl(name="niah_mq_q2", path=str(authors_file))
    _, examples = dataset.load(Paths(samples_dir=str(tmp_path)), smol_tokenizer)
    assert len(examples) == 2
    default = compose_stage("run", "dataset=cached", "dataset.name=t", f"paths.root={tmp_path}")
    assert build(default.dataset, "dataset").path == f"{tmp_path}/exp/exp2/data/t.jsonl"  # the sampled cache


def test_run_exp_dry_run_and_one_line_error(authors_file, tmp_path):
    """From the command line: the file loads (dry run, no model); a bad row stops the stage with one line, exit 2."""
    bad_row = reference_row()
    bad_row["metadata"]["boxed_answer"] = "nowhere"
    bad = write_jsonl(tmp_path / "bad.jsonl", [reference_row(), bad_row])

    def run_exp(path, run_dir):
        return run_script("run_exp.py", "dataset=cached", f"dataset.path={path}", "dataset.name=niah_mq_q2",
                          "dry_run=true", f"paths.model_cache_dir={CACHE_DIR}", f"paths.samples_dir={tmp_path / 's'}",
                          f"hydra.run.dir={run_dir}")

    out = run_exp(bad, tmp_path / "run_bad")
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].startswith(f"error: {bad}:2: field 'metadata.boxed_answer': ")
    out = run_exp(authors_file, tmp_path / "run")
    assert out.returncode == 0, out.stderr[-2000:]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert (manifest["dataset"]["kind"], manifest["dataset"]["examples"]) == ("cached", 2)
