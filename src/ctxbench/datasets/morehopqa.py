"""MoreHopQA (a JSON array of multi-hop questions with their gold paragraphs) -> CachedExample rows (spec §2)."""

from __future__ import annotations

import json
from pathlib import Path

from ctxbench.errors import DataError
from ctxbench.example import CachedExample


def morehopqa_prompt(context: list, question: str) -> str:
    """Paragraph sentences joined without separator, paragraphs joined by a space (titles dropped), then the question."""
    return " ".join("".join(sentences) for _title, sentences in context) + "\n" + question


def _check_row(row, i: int, path: Path) -> None:
    def fail(problem: str, fld: str):
        raise DataError(f"row {i}: {problem}", file=path, field=fld)

    if not isinstance(row, dict):
        fail(f"expected an object, got {type(row).__name__}", f"[{i}]")
    for key in ("_id", "question", "answer", "context"):
        if key not in row:
            fail("missing field", key)
    for key in ("_id", "question", "answer"):
        if not isinstance(row[key], str):
            fail(f"must be a string, got {type(row[key]).__name__}", key)
    ctx = row["context"]
    ok = isinstance(ctx, list) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], list)
        and all(isinstance(s, str) for s in p[1]) for p in ctx)
    if not ok:
        fail("must be a list of [title, [sentence, ...]]", "context")


def load_morehopqa(path: str | Path) -> list[CachedExample]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: MoreHopQA file not found (set dataset.path)")
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"invalid JSON: {exc.msg} (column {exc.colno})", file=path, line=exc.lineno) from None
    if not isinstance(rows, list):
        raise DataError("expected a JSON array of rows", file=path)
    out = []
    for i, row in enumerate(rows):
        _check_row(row, i, path)
        out.append(CachedExample(
            prompt=morehopqa_prompt(row["context"], row["question"]),
            target=None,
            metadata={"dataset": "morehopqa", "id": row["_id"], "answer": row["answer"],
                      "original_context": row["context"], "reference_answer": row["answer"]},
        ))
    return out
