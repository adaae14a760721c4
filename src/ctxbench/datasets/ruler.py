"""RULER-format JSONL (generated or upstream) -> CachedExample rows with the gold target (docs/data.md, "RULER JSONL").

Generated files record, per line, the tokenizer their lengths were fitted with (``tokenizer``: ``name_or_path`` and
``vocab_sha256``). Loading such a file with another tokenizer logs one warning naming the file, the recorded tokenizer
and the one in use (the lengths, and so the comparability with RULER's numbers, hold for the recorded one only).
Tokenizers are compared by vocabulary fingerprint when both sides have one, else by name. Upstream files, which record
nothing, load without a check.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional

from ctxbench.datasets.ruler_gen.common import gold_target
from ctxbench.datasets.ruler_gen.length import tokenizer_record
from ctxbench.datasets.sentences import sentences_overlapping, split_sentences
from ctxbench.core.errors import DataError
from ctxbench.example import CachedExample
from ctxbench.core.jsonl import iter_jsonl
from ctxbench.utils.spans import answer_token_spans, tokenizer_name


log = logging.getLogger(__name__)


def ruler_target(answer_prefix: str, outputs: list[str]) -> tuple[str, int]:
    """The gold target and the character offset where the answer list starts inside it."""
    return gold_target(answer_prefix, outputs)


def _describe(rec: dict) -> str:
    sha = rec.get("vocab_sha256")
    return f"{rec.get('name_or_path')!r}" + (f" (vocab sha256 {sha[:12]})" if sha else "")


def tokenizer_mismatch(recorded: Any, in_use: dict) -> bool:
    """Whether a recorded ``tokenizer`` differs from ``in_use`` (both ``tokenizer_record`` dicts)."""
    if not isinstance(recorded, dict):
        return False
    if recorded.get("vocab_sha256") and in_use.get("vocab_sha256"):
        return recorded["vocab_sha256"] != in_use["vocab_sha256"]
    return recorded.get("name_or_path") != in_use.get("name_or_path")


def _check_line(obj: dict[str, Any], path: Path, lineno: int) -> None:
    """A RULER line's fields, refused naming the file, line and field: ``input`` a string, ``outputs`` a non-empty
    list of strings, the optional ``answer_prefix``, ``tokenizer`` and ``needle_spans`` (``[start, end)`` offsets
    inside the input)."""
    problem = _line_problem(obj)
    if problem is not None:
        raise DataError(problem[0], file=path, line=lineno, field=problem[1])


def _line_problem(obj: dict[str, Any]) -> Optional[tuple[str, str]]:
    """``(problem, field)`` of the first field that is wrong, or None."""
    for key in ("input", "outputs"):
        if key not in obj:
            return f"missing field (a RULER row has input and outputs){_other_format(obj)}", key
    if not isinstance(obj["input"], str):
        return f"must be a string, got {type(obj['input']).__name__}", "input"
    if not (isinstance(obj["outputs"], list) and obj["outputs"] and all(isinstance(o, str) for o in obj["outputs"])):
        return "must be a non-empty list of strings", "outputs"
    if not isinstance(obj.get("answer_prefix", ""), str):
        return "must be a string", "answer_prefix"
    if not isinstance(obj.get("tokenizer", {}), (dict, type(None))):
        return "must be an object ({name_or_path, vocab_sha256})", "tokenizer"
    spans = obj.get("needle_spans")
    if spans is not None and not isinstance(spans, list):
        return "must be a list", "needle_spans"
    n = len(obj["input"])
    for k, ns in enumerate(spans or []):
        sp = ns.get("span") if isinstance(ns, dict) else None
        if not (isinstance(sp, list) and len(sp) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in sp)):
            return f"must be [start, end) character offsets, got {sp!r}", f"needle_spans[{k}].span"
        if not 0 <= sp[0] < sp[1] <= n:
            return f"span {sp} lies outside the input's {n} characters", f"needle_spans[{k}].span"
    return None


def _other_format(obj: dict[str, Any]) -> str:
    """A hint when a line without RULER's fields is another format this project reads."""
    if {"prompt", "target"} <= set(obj):  # a sampled CachedExample cache, not RULER rows
        return "; this line is a CachedExample (prompt, target): read such a cache with dataset=cached " \
               "dataset.path=<file>"
    if {"_id", "question", "context"} <= set(obj):
        return "; this line is a MoreHopQA row: dataset=morehopqa reads them"
    return ""


def ruler_example(obj: dict[str, Any], *, task: str, tokenizer=None) -> CachedExample:
    """One RULER line (already checked) -> CachedExample. With a tokenizer, the sink span (the answer list's tokens) is
    computed in its coordinates; without one it is left null and recomputed later from ``metadata.sink_char_span``."""
    prefix = obj.get("answer_prefix", "")
    prompt = obj["input"] + prefix
    target, answer_start = ruler_target(prefix, obj["outputs"])
    needle_spans = obj.get("needle_spans")
    sentences = split_sentences(prompt)
    attr_mask = (sentences_overlapping(sentences, [tuple(ns["span"]) for ns in needle_spans])
                 if needle_spans is not None else None)
    index = obj.get("index")
    metadata: dict[str, Any] = {
        "dataset": "ruler", "task": task, "index": index, "id": f"{task}/{index}",
        "length": obj.get("length"), "length_w_model_temp": obj.get("length_w_model_temp"),
        "outputs": obj["outputs"], "answer_prefix": prefix,
        "token_position_answer": obj.get("token_position_answer"), "needle_spans": needle_spans,
        "prompt_sentence_count": len(sentences), "reference_answer": ", ".join(obj["outputs"]),
        "sink_char_span": [answer_start, len(target)],
    }
    if obj.get("tokenizer") is not None:
        metadata["fitted_tokenizer"] = obj["tokenizer"]
    sink = None
    if tokenizer is not None:
        sink, _thinking, _n = answer_token_spans(tokenizer, target, answer_start, len(target))
        metadata["span_tokenizer"] = tokenizer_name(tokenizer)
    # A gold RULER target has no chain of thought: the prefix is not reasoning, so thinking_span stays null.
    return CachedExample(prompt=prompt, target=target, indices_to_explain=sink, attr_mask_indices=attr_mask,
                         sink_span=sink, thinking_span=None, metadata=metadata)


def load_ruler_jsonl(path: str | Path, *, task: Optional[str] = None, tokenizer=None,
                     limit: Optional[int] = None) -> list[CachedExample]:
    """The file's rows as CachedExamples; ``limit``: only the first ``limit`` are converted (sentence segmentation
    and token spans take most of the time: a run of 4 examples need not pay for 500), while every line is still
    checked, so a bad line anywhere refuses the file whatever the limit."""
    path = Path(path)
    task = task or (path.parent.name if path.name == "validation.jsonl" else path.stem)
    out = []
    seen: dict[Any, int] = {}
    in_use = tokenizer_record(tokenizer) if tokenizer is not None else None
    warned: set[str] = set()
    for lineno, obj in iter_jsonl(path):
        _check_line(obj, path, lineno)
        recorded = obj.get("tokenizer")
        if in_use is not None and tokenizer_mismatch(recorded, in_use) and repr(recorded) not in warned:
            warned.add(repr(recorded))
            log.warning("%s was fitted with tokenizer %s but is used with %s: its lengths (length, "
                        "length_w_model_temp, token_position_answer) do not hold for this tokenizer; regenerate it "
                        "with this tokenizer", path, _describe(recorded), _describe(in_use))
        if "index" not in obj:
            obj = {**obj, "index": lineno - 1}
        if obj["index"] in seen:
            raise DataError(f"duplicate index {obj['index']!r} (first on line {seen[obj['index']]})",
                            file=path, line=lineno, field="index")
        seen[obj["index"]] = lineno
        if limit is None or len(out) < limit:
            out.append(ruler_example(obj, task=task, tokenizer=tokenizer))
    return out
