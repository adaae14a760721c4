"""RULER-format generator: the span, answer, length and position guarantees on every generated sample of every task,
with the real SmolLM2 tokenizer; determinism; independence of samples; the task registry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ctxbench.datasets.ruler_gen import REFERENCE_TASKS, TASKS, TokenCounter, generate_task, generate_task_with_fits, \
    task_path, write_task
from ctxbench.core.errors import UnknownDatasetError

FIELDS = ["index", "input", "outputs", "length", "length_w_model_temp", "answer_prefix", "token_position_answer",
          "needle_spans", "tokenizer"]
SPAN_FIELDS = {"title", "doc_index", "document_number", "sentence_index", "sentence", "context_span", "span", "snippet"}
TTG = {"niah": 128, "vt": 30, "qa": 32}
N_512 = 20
TASKS_1024 = ("niah_mq_q8", "niah_mv_v8", "vt_h2_c3", "vt_h10_c1", "hotpotqa_long", "niah_multikey_3")
N_1024 = 4
# long contexts (the second model family's lengths): one sample each at 16k and 32k tokens
LONG = (("niah_mq_q2", 16384), ("vt_h2_c3", 16384), ("niah_mv_v2", 32768))
# Ten hops need eleven noise units in the worked example and in the task (upstream's placement): more than 512 tokens.
TOO_LONG_AT_512 = ("vt_h10_c1",)
TASKS_512 = tuple(t for t in TASKS if t not in TOO_LONG_AT_512)


@pytest.fixture(scope="module")
def counter(smol_tokenizer):
    return TokenCounter(smol_tokenizer)


@pytest.fixture(scope="module")
def generated(counter, morehopqa_path):
    """(task, max_seq_length) -> (records, fits): every task at 512 tokens, a selection at 1,024, three at 16k/32k."""
    out = {}
    for task in TASKS_512:
        out[task, 512] = generate_task_with_fits(task, counter=counter, max_seq_length=512, num_samples=N_512,
                                                 seed=7, morehopqa_path=morehopqa_path)
    for task in TASKS_1024:
        out[task, 1024] = generate_task_with_fits(task, counter=counter, max_seq_length=1024, num_samples=N_1024,
                                                  seed=7, morehopqa_path=morehopqa_path)
    for task, length in LONG:
        out[task, length] = generate_task_with_fits(task, counter=counter, max_seq_length=length, num_samples=1,
                                                    seed=7, morehopqa_path=morehopqa_path)
    return out


def _ntok(tok, text: str) -> int:
    return len(tok(text, add_special_tokens=False)["input_ids"])


def _cases():
    return [(t, 512) for t in TASKS_512] + [(t, 1024) for t in TASKS_1024] + list(LONG)


def _spans(rec):
    return [tuple(ns["span"]) for ns in rec["needle_spans"]]


@pytest.mark.parametrize("task,length", _cases())
def test_spans_are_the_evidence_sentences(generated, task, length):
    records, _ = generated[task, length]
    for rec in records:
        assert list(rec) == FIELDS
        assert rec["needle_spans"], f"{task}[{rec['index']}]: no evidence"
        prev_end = -1
        for ns in sorted(rec["needle_spans"], key=lambda x: x["span"]):
            # hotpotqa_long's sentences also name their reasoning step (a row with a question decomposition)
            assert set(ns) - {"hop"} == SPAN_FIELDS
            s, e = ns["span"]
            assert 0 <= s < e <= len(rec["input"])
            assert rec["input"][s:e] == ns["sentence"]
            assert ns["sentence"] == ns["sentence"].strip()
            assert s >= prev_end, f"{task}[{rec['index']}]: overlapping spans"
            prev_end = e
            cs, ce = ns["context_span"]
            first = rec["needle_spans"][0]
            assert ce - cs == e - s and s - cs == first["span"][0] - first["context_span"][0]


def _niah_query_keys(rec) -> list[str]:
    m = re.fullmatch(r" The special magic \w+ for (.+) mentioned in the provided text (?:are|is)", rec["answer_prefix"])
    assert m, rec["answer_prefix"]
    q = m.group(1)
    parts = q.split(", and ") if ", and " in q else [q]
    return [k for part in parts[:-1] for k in part.split(", ")] + parts[-1:]


@pytest.mark.parametrize("task,length", [c for c in _cases() if TASKS[c[0]].family in ("niah", "vt")])
def test_outputs_inside_evidence_and_queried_needles_present(generated, task, length):
    records, _ = generated[task, length]
    family = TASKS[task].family
    for rec in records:
        text, spans = rec["input"], _spans(rec)
        sentences = [text[s:e] for s, e in spans]
        assert rec["outputs"]
        for out in rec["outputs"]:
            assert any(out in text[s:e] for s, e in spans), f"{task}[{rec['index']}]: {out!r} outside the evidence"
        if family == "niah":
            p = TASKS[task].params
            keys = _niah_query_keys(rec)
            assert len(keys) == p.num_q and len(rec["outputs"]) == p.num_q * p.num_v
            for key in keys:
                pattern = rf"One of the special magic \w+ for {re.escape(key)} is: .+\."
                found = [s for s in sentences if re.fullmatch(pattern, s)]
                assert len(found) == p.num_v, f"{task}[{rec['index']}]: needles of {key!r}: {found}"
        else:
            value = re.search(r"assigned the value (\d+), they are: $", rec["answer_prefix"]).group(1)
            assert f"VAR {rec['outputs'][0]} = {value}" in sentences
            for prev, name in zip(rec["outputs"], rec["outputs"][1:]):
                assert f"VAR {name} = VAR {prev}" in sentences  # the chain is complete and in order
            assert len(sentences) == TASKS[task].params.num_hops + 1


@pytest.mark.parametrize("length", [512, 1024])
def test_qa_gold_documents_present_and_spans_inside_them(generated, morehopqa_path, length):
    rows = {r["previous_question"]: r for r in json.loads(Path(morehopqa_path).read_text(encoding="utf-8"))}
    records, _ = generated["hotpotqa_long", length]
    for rec in records:
        text = rec["input"]
        question = text.rsplit("\n\nQuestion: ", 1)[1]
        row = rows[question]
        assert rec["outputs"] == [row["previous_answer"]]
        ctx_end = text.index("\n\nAnswer the question based on the given documents.", text.index("Document 1:\n"))
        docs = {}
        for m in re.finditer(r"Document (\d+):\n", text[:ctx_end]):
            docs[int(m.group(1))] = m.start()
        bounds = {}
        starts = sorted(docs.items(), key=lambda kv: kv[1])
        for (n, st), nxt in zip(starts, starts[1:] + [(None, ctx_end + 2)]):
            bounds[n] = (st, nxt[1] - 2)  # the block ends before the "\n\n" separator
        blocks = {n: text[s:e] for n, (s, e) in bounds.items()}
        for title, sents in row["context"]:
            # Sentences as written, a space added where neither side has whitespace (no glued "Balser.It").
            body = sents[0] if sents else ""
            for sent in sents[1:]:
                body += " " + sent if body and sent and not body[-1].isspace() and not sent[0].isspace() else sent
            assert any(b.endswith(f":\n{title}\n{body}") for b in blocks.values()), f"gold {title!r} missing"
        for ns in rec["needle_spans"]:
            s, e = ns["span"]
            bs, be = bounds[ns["document_number"]]
            assert bs <= s and e <= be, f"span {ns['span']} outside document {ns['document_number']}"
            assert text[bs:be].startswith(f"Document {ns['document_number']}:\n{ns['title']}\n")
            assert ns["doc_index"] == ns["document_number"] - 1
            gold = dict((t, ss) for t, ss in row["context"])
            assert ns["sentence"] == gold[ns["title"]][ns["sentence_index"]].strip()


@pytest.mark.parametrize("task,length", _cases())
def test_length_fits_and_is_close(generated, smol_tokenizer, task, length):
    records, fits = generated[task, length]
    ttg = TTG[TASKS[task].family]
    for rec, fit in zip(records, fits):
        # Upstream's rule: the input is counted with its answer prefix.
        n = _ntok(smol_tokenizer, rec["input"] + rec["answer_prefix"])
        assert rec["length"] == n + ttg <= length
        assert rec["length_w_model_temp"] == rec["length"]
        assert fit.tokens == n and fit.budget <= length - ttg
        slack = fit.budget - fit.tokens
        # As close as the unit size allows: the slack is smaller than the smallest unit left out (+ boundary merges).
        assert fit.next_unit_tokens is not None and 0 <= slack <= fit.next_unit_tokens + 4, \
            (slack, fit.next_unit_tokens)
    if TASKS[task].family != "qa" and task != "niah_multikey_3":  # small units: within a few percent on average
        mean_gap = sum(length - r["length"] for r in records) / len(records)
        assert mean_gap <= 0.05 * length


@pytest.mark.parametrize("task,length", _cases())
def test_token_position_answer_recomputed(generated, smol_tokenizer, task, length):
    for rec in generated[task, length][0]:
        pos = rec["input"].find(rec["outputs"][0])
        expected = None if pos < 0 else _ntok(smol_tokenizer, rec["input"][:pos])
        assert rec["token_position_answer"] == expected
        if TASKS[task].family != "qa":
            assert expected is not None


@pytest.mark.parametrize("task", list(TASKS_512))
def test_different_indices_differ(generated, task):
    inputs = [r["input"] for r in generated[task, 512][0]]
    assert len(set(inputs)) == len(inputs)
    assert [r["index"] for r in generated[task, 512][0]] == list(range(N_512))


def test_sample_depends_only_on_its_index(counter, morehopqa_path):
    for task in ("niah_mq_q4", "vt_h2_c3", "hotpotqa_long"):
        batch = generate_task(task, counter=counter, max_seq_length=512, num_samples=3, seed=3,
                              morehopqa_path=morehopqa_path)
        alone = generate_task(task, counter=counter, max_seq_length=512, num_samples=1, seed=3, start_index=2,
                              morehopqa_path=morehopqa_path)
        assert alone[0] == batch[2]
        other_seed = generate_task(task, counter=counter, max_seq_length=512, num_samples=1, seed=4,
                                   morehopqa_path=morehopqa_path)
        assert other_seed[0]["input"] != batch[0]["input"]


def test_write_task_is_deterministic_and_atomic(smol_tokenizer, morehopqa_path, tmp_path):
    for task in ("niah_mv_v4", "vt_h4_c1", "hotpotqa_long", "niah_multikey_2"):
        paths = []
        for run in ("a", "b"):
            # A fresh counter each time: memoised unit counts must not change the output.
            p = write_task(tmp_path / run, task, max_seq_length=512, tokenizer=smol_tokenizer, num_samples=4, seed=11,
                           morehopqa_path=morehopqa_path)
            assert p == task_path(tmp_path / run, task, 512) == tmp_path / run / "512" / task / "validation.jsonl"
            paths.append(p)
        assert paths[0].read_bytes() == paths[1].read_bytes()
        assert sorted(x.name for x in paths[0].parent.iterdir()) == ["validation.jsonl"]  # no temp file left
        lines = paths[0].read_text(encoding="utf-8").splitlines()
        assert [json.loads(line)["index"] for line in lines] == [0, 1, 2, 3]


def test_registry_and_errors(smol_tokenizer):
    assert len(REFERENCE_TASKS) == 11  # + morehopqa and math = the 13 rows of FlashTrace's Table 1
    for t in ("niah_single_1", "niah_single_2", "niah_single_3",
              "niah_multikey_1", "niah_multikey_2", "niah_multikey_3"):
        assert t in TASKS
    with pytest.raises(UnknownDatasetError) as err:
        generate_task("niah_nope", tokenizer=smol_tokenizer, max_seq_length=512, num_samples=1)
    for t in REFERENCE_TASKS:
        assert t in str(err.value)
    with pytest.raises(ValueError, match="morehopqa_path"):
        generate_task("hotpotqa_long", tokenizer=smol_tokenizer, max_seq_length=512, num_samples=1)
    with pytest.raises(ValueError, match="max_seq_length"):
        generate_task("vt_h10_c1", tokenizer=smol_tokenizer, max_seq_length=160, num_samples=1)


def test_singular_wording_and_templates(generated):
    rec = generated["niah_single_1", 512][0][0]
    assert rec["input"].startswith("A special magic number is hidden within the following text.")
    assert rec["answer_prefix"].endswith("mentioned in the provided text is")
    assert "\nWhat is the special magic number for " in rec["input"]
    rec = generated["niah_mq_q2", 512][0][0]
    assert rec["input"].startswith("Some special magic numbers are hidden within the following text. Make sure to "
                                   "memorize it. I will quiz you about the numbers afterwards.\n")
    assert rec["answer_prefix"].startswith(" The special magic numbers for ") and ", and " in rec["answer_prefix"]
    vt = generated["vt_h2_c3", 512][0][0]["input"]
    # the one-shot worked example first, then the task
    assert vt.count("Memorize and track the chain(s) of variable assignment hidden in the following text.") == 2
    assert vt.index("they are: ") < vt.rindex("Memorize and track")
    qa = generated["hotpotqa_long", 512][0][0]
    assert qa["answer_prefix"] == " Answer:"
    assert qa["input"].startswith("Answer the question based on the given documents. Only give me the answer and do "
                                  "not output any other words.\n\nThe following are given documents.\n\nDocument 1:\n")


def test_loads_with_the_ruler_loader(smol_tokenizer, morehopqa_path, tmp_path):
    ruler = pytest.importorskip("ctxbench.datasets.ruler")
    for task in ("niah_mq_q2", "vt_h2_c3", "hotpotqa_long"):
        path = write_task(tmp_path, task, max_seq_length=512, tokenizer=smol_tokenizer, num_samples=2, seed=1,
                          morehopqa_path=morehopqa_path)
        examples = ruler.load_ruler_jsonl(path, task=task)
        assert len(examples) == 2
        for ex in examples:
            assert ex.attr_mask_indices, f"{task}: no gold sentence overlaps the needle spans"


@pytest.mark.parametrize("task,length", _cases())
def test_attr_mask_indices_recomputed(generated, smol_tokenizer, task, length):
    """The loader's gold sentences, recomputed by brute force: a prompt sentence is gold iff one of its characters
    lies inside a needle span; the gold sentences together hold every needle sentence."""
    from ctxbench.datasets.ruler import ruler_example
    from ctxbench.datasets.sentences import split_sentences

    for rec in generated[task, length][0]:
        ex = ruler_example(rec, task=task)
        evidence = {c for ns in rec["needle_spans"] for c in range(*ns["span"])}
        sentences = split_sentences(ex.prompt)
        expected = [i for i, (a, b) in enumerate(sentences) if any(c in evidence for c in range(a, b))]
        assert ex.attr_mask_indices == expected and expected
        gold_text = " ".join(ex.prompt[a:b] for i, (a, b) in enumerate(sentences) if i in expected)
        for ns in rec["needle_spans"]:
            assert all(part in gold_text for part in ns["sentence"].split("\n") if part)


def test_qa_evidence_is_labelled_with_its_reasoning_step(generated, morehopqa_path):
    """hotpotqa_long's evidence sentences carry the question-decomposition step they support (``hop``, 1-based): the
    sentence of step h lies in that step's paragraph and holds its answer where the paragraph has it; the first
    step's sentences are the bridge (per-hop recall, docs/metrics.md)."""
    rows = {r["previous_question"]: r for r in json.loads(Path(morehopqa_path).read_text(encoding="utf-8"))}
    records, _ = generated["hotpotqa_long", 1024]
    hops_seen = set()
    for rec in records:
        row = rows[rec["input"].rsplit("\n\nQuestion: ", 1)[1]]
        steps = [s for s in row["question_decomposition"] if s.get("paragraph_support_title")]
        for ns in rec["needle_spans"]:
            step = row["question_decomposition"][ns["hop"] - 1]
            assert ns["title"] == step["paragraph_support_title"]
            paragraph = dict((t, s) for t, s in row["context"])[ns["title"]]
            if any(step["answer"].lower() in s.lower() for s in paragraph):
                assert step["answer"].lower() in ns["sentence"].lower()
            hops_seen.add(ns["hop"])
        assert len(steps) >= 2
    assert hops_seen >= {1, 2}
    # the other tasks' records keep their fields (no hop key): their files are as before
    niah, _ = generated["niah_mq_q8", 1024]
    assert all("hop" not in ns for rec in niah for ns in rec["needle_spans"])
