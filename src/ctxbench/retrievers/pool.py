"""Pools of worked examples and the rows retrievers read.

``load_pool(path)`` reads a JSONL pool (default: the shipped ``resources/icl_pool/box_pool.jsonl``, README there):
every line an object with a unique string ``id``; the box format's lines (``context``, ``question``, ``reasoning``,
``answer``, ``answer_sentence``) gain ``prompt`` and ``response``. ``example_rows`` turns the dataset's
``CachedExample`` rows into query rows: ``id`` (the example's stable id), ``prompt``, ``context`` and ``question``
(the prompt split where the data marks its question), ``index`` (its position in the whole dataset, or
``metadata.index``). Nothing else is copied: a gold answer in the metadata never reaches a template.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Optional, Sequence

from ctxbench.core.errors import DataError
from ctxbench.core.jsonl import iter_jsonl

BOX_FIELDS = ("context", "question", "reasoning", "answer", "answer_sentence")


def default_pool_path() -> Path:
    return Path(str(resources.files("ctxbench") / "resources" / "icl_pool" / "box_pool.jsonl"))


def box_prompt(context: str, question: str) -> str:
    """A MoreHopQA-shaped prompt: the context, a line break, the question."""
    return context + "\n" + question


def box_response(reasoning: str, answer_sentence: str) -> str:
    """The reasoning, then the final sentence in ``\\box{}``."""
    return reasoning + " \\box{" + answer_sentence + "}"


def load_pool(path: Optional[str | Path] = None) -> list[dict[str, Any]]:
    """The pool's rows in file order; errors name the file, line and field."""
    path = Path(path) if path else default_pool_path()
    if not path.is_file():
        raise DataError("no such pool file (retriever pool: a JSONL file of worked examples)", file=path)
    rows, seen = [], {}
    for lineno, obj in iter_jsonl(path):
        rid = obj.get("id")
        if not isinstance(rid, str) or not rid:
            raise DataError("every pool row needs a non-empty string id", file=path, line=lineno, field="id")
        if rid in seen:
            raise DataError(f"id {rid!r} already used on line {seen[rid]}", file=path, line=lineno, field="id")
        seen[rid] = lineno
        if any(k in obj for k in BOX_FIELDS):
            for k in BOX_FIELDS:
                if not isinstance(obj.get(k), str) or not obj[k].strip():
                    raise DataError("a box-format pool row needs a non-empty string here", file=path, line=lineno,
                                    field=k)
            if obj["answer"] not in obj["answer_sentence"]:
                raise DataError(f"the answer {obj['answer']!r} does not appear in the answer sentence", file=path,
                                line=lineno, field="answer_sentence")
            obj.setdefault("prompt", box_prompt(obj["context"], obj["question"]))
            obj.setdefault("response", box_response(obj["reasoning"], obj["answer_sentence"]))
        rows.append(obj)
    if not rows:
        raise DataError("the pool is empty", file=path)
    return rows


def question_split(prompt: str, metadata: dict[str, Any]) -> tuple[Optional[str], str]:
    """``(question, context)`` of a prompt: the question where the data marks it (``metadata.question_char_span``,
    ``[start, end)`` characters of the prompt, as MoreHopQA's rows have it) and the prompt without it, stripped; else
    ``(None, prompt)``."""
    span = metadata.get("question_char_span")
    if not (isinstance(span, (list, tuple)) and len(span) == 2 and 0 <= span[0] <= span[1] <= len(prompt)):
        return None, prompt
    a, z = span
    return prompt[a:z].strip(), (prompt[:a] + prompt[z:]).strip()


def example_rows(examples: Sequence[Any], start: int = 0) -> list[dict[str, Any]]:
    """Query rows for CachedExample-like objects (``prompt``, ``metadata``, ``example_id``); call it on the whole
    dataset before sharding so ``index`` is the position in the dataset (``start`` offsets it). Besides ``id``,
    ``prompt`` and ``index``, each row has ``context`` (the prompt without its question) and, where the data marks the
    question, ``question`` (``question_split``): the retrievers' default fields, ``[question, context]``, then read the
    question first, as they do in the box pool's rows, instead of a prompt that a 256-token encoder cuts before it."""
    rows = []
    for i, ex in enumerate(examples):
        meta = getattr(ex, "metadata", {}) or {}
        pos = meta.get("index")
        question, context = question_split(ex.prompt, meta)
        row = {"id": ex.example_id, "prompt": ex.prompt, "context": context,
               "index": pos if isinstance(pos, int) and not isinstance(pos, bool) else start + i}
        if question is not None:
            row["question"] = question
        rows.append(row)
    return rows
