"""MoreHopQA (a JSON array of multi-hop questions with their gold paragraphs) -> CachedExample rows (docs/data.md).

The project ships the 150-row sample published with the dataset (CC BY 4.0, Schnitzler et al., arXiv 2406.13397) as
the offline default; any file of the same schema (e.g. the 1,118-row ``with_human_verification.json``) can be named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import ClassVar, Optional

from ctxbench.datasets.base import Dataset, Paths
from ctxbench.datasets.sentences import join_sentences
from ctxbench.core.errors import DataError
from ctxbench.example import CachedExample


def morehopqa_sample() -> Path:
    """The packaged 150-row MoreHopQA sample."""
    return Path(str(resources.files("ctxbench") / "resources" / "morehopqa" / "morehopqa_final_150samples.json"))


def morehopqa_prompt(context: list, question: str) -> str:
    """The paragraphs joined by a space (titles dropped), then a line with the question, as FlashTrace's code builds
    MoreHopQA prompts (``MoreHopQAAttributionDataset``), except that two sentences are joined with a space where neither
    has whitespace at the join: FlashTrace joins them bare, which glues ``nobleman.Born`` in 102 of the 150 packaged
    rows and makes one sentence of two for sentence segmentation (perturbation, ContextCite, coverage)."""
    return " ".join(join_sentences(sentences)[0] for _title, sentences in context) + "\n" + question


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
        raise DataError("MoreHopQA file not found (set dataset.path)", file=path)
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"invalid JSON: {exc.msg} (column {exc.colno})", file=path, line=exc.lineno) from None
    if not isinstance(rows, list):
        raise DataError("expected a JSON array of rows", file=path)
    out = []
    for i, row in enumerate(rows):
        _check_row(row, i, path)
        prompt = morehopqa_prompt(row["context"], row["question"])
        out.append(CachedExample(
            prompt=prompt,
            target=None,
            # question_char_span: where the question sits in the prompt (its last line), for the parts that must tell
            # the question from the context (the in-context retrievers' query rows, ContextCite's sources)
            metadata={"dataset": "morehopqa", "id": row["_id"], "answer": row["answer"],
                      "original_context": row["context"], "reference_answer": row["answer"],
                      "question": row["question"],
                      "question_char_span": [len(prompt) - len(row["question"]), len(prompt)]},
        ))
    return out


@dataclass(kw_only=True)
class MoreHopQA(Dataset):
    """Raw MoreHopQA rows (no target: the sampling stage makes the generations to explain). ``path``: a file of the
    MoreHopQA schema; None = the packaged 150-row sample."""

    kind: ClassVar[str] = "morehopqa"
    path: Optional[str] = None

    def raw_path(self, paths: Paths, tokenizer=None) -> Path:
        return Path(self.path) if self.path else morehopqa_sample()

    def load_raw(self, path: Path, tokenizer=None, limit: Optional[int] = None) -> list[CachedExample]:
        return load_morehopqa(path)[:limit]
