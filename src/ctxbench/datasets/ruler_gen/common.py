"""Pieces shared by the three families: building a context with tracked evidence spans, filling a template around it,
and assembling the output line.

``needle_spans`` entries (one per evidence sentence):
- ``span``: [start, end) into ``input``; ``context_span``: the same interval relative to the start of ``{context}``.
- ``sentence``: exactly ``input[start:end]`` (separators and the trailing space of vt statements are outside the span).
- ``sentence_index``: niah/vt: position of the evidence among all units (haystack units + inserted needles/statements)
  of the context; qa: index of the sentence inside its paragraph.
- ``title`` / ``doc_index`` / ``document_number``: qa: the paragraph title, its 0-based position among the shuffled
  documents and the number printed as "Document {n}:"; niah/vt have no documents: all three are null.
- ``snippet``: a short label for reports: the sentence cut to 80 characters ("..." when cut).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Optional

SNIPPET_CHARS = 80


def derive_rng(seed: int, *parts: Any) -> random.Random:
    """An independent, platform-stable RNG per (seed, task, index, purpose): samples never depend on each other."""
    key = "\x1f".join(map(str, (seed, *parts))).encode()
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))


@dataclass
class Evidence:
    sentence: str
    context_span: tuple[int, int]
    sentence_index: int
    title: Optional[str] = None
    doc_index: Optional[int] = None
    document_number: Optional[int] = None


@dataclass
class ContextBuilder:
    """Concatenates pieces with a separator, recording the span of evidence pieces."""

    sep: str
    parts: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    _len: int = 0

    def add(self, text: str, *, evidence: bool = False, unit_index: Optional[int] = None, **meta) -> int:
        """Append one piece; return its start offset. Evidence spans cover the piece stripped of outer whitespace."""
        if self.parts:
            self.parts.append(self.sep)
            self._len += len(self.sep)
        start = self._len
        self.parts.append(text)
        self._len += len(text)
        if evidence:
            self.mark(start + len(text) - len(text.lstrip()), start + len(text.rstrip()), text.strip(),
                      unit_index if unit_index is not None else len(self.evidence), **meta)
        return start

    def mark(self, start: int, end: int, sentence: str, sentence_index: int, **meta) -> None:
        self.evidence.append(Evidence(sentence, (start, end), sentence_index, **meta))

    @property
    def length(self) -> int:
        return self._len

    def text(self) -> str:
        return "".join(self.parts)


@dataclass
class Prompt:
    input: str
    context_start: int
    evidence: list[Evidence]


def fill_template(template: str, context: str, evidence: list[Evidence], *, prefix: str = "", **fmt) -> Prompt:
    """``prefix + template.format(context=context, **fmt)``, knowing where the context starts (for the spans)."""
    head, tail = template.split("{context}")
    head = prefix + head.format(**fmt)
    return Prompt(head + context + tail.format(**fmt), len(head), evidence)


def needle_span_records(prompt: Prompt) -> list[dict]:
    out = []
    for ev in sorted(prompt.evidence, key=lambda e: e.context_span):
        s, e = ev.context_span
        span = [prompt.context_start + s, prompt.context_start + e]
        assert prompt.input[span[0]:span[1]] == ev.sentence, "evidence span does not match its sentence"
        snippet = ev.sentence if len(ev.sentence) <= SNIPPET_CHARS else ev.sentence[:SNIPPET_CHARS - 3] + "..."
        out.append({"title": ev.title, "doc_index": ev.doc_index, "document_number": ev.document_number,
                    "sentence_index": ev.sentence_index, "sentence": ev.sentence, "context_span": [s, e],
                    "span": span, "snippet": snippet})
    return out


def answer_token_position(counter, text: str, outputs: list[str]) -> Optional[int]:
    """Tokens of ``text`` before the first occurrence of ``outputs[0]`` (upstream niah's definition); null if absent."""
    if not outputs:
        return None
    pos = text.find(outputs[0])
    return None if pos < 0 else (counter.count(text[:pos]) if pos else 0)


def make_record(index: int, prompt: Prompt, outputs: list[str], answer_prefix: str, n_tokens: int,
                tokens_to_generate: int, template_tokens: int, token_position: Optional[int]) -> dict:
    # Key order is the spec's table order: lines serialise identically run to run.
    length = n_tokens + tokens_to_generate
    return {"index": index, "input": prompt.input, "outputs": list(outputs), "length": length,
            "length_w_model_temp": length + template_tokens, "answer_prefix": answer_prefix,
            "token_position_answer": token_position, "needle_spans": needle_span_records(prompt)}
