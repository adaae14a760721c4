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
- ``hop`` (qa rows with a ``question_decomposition`` only): the reasoning step the sentence supports, 1-based.

Every line also carries ``tokenizer`` (``length.tokenizer_record``): the tokenizer its length was fitted with.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, TypeVar

SNIPPET_CHARS = 80
R = TypeVar("R")


def derive_rng(seed: int, *parts: Any) -> random.Random:
    """An independent, platform-stable RNG per (seed, task, index, purpose): samples never depend on each other."""
    key = "\x1f".join(map(str, (seed, *parts))).encode()
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))


def insert_before_distinct_rows(rows: Sequence[R], items: Sequence[R], rng: random.Random) -> list[R]:
    """``items``, in their order, each inserted right before a distinct row of ``rows`` drawn at random (upstream
    RULER's insertion into noise lines): two items are never adjacent and none is last.
    Needs len(rows) >= len(items)."""
    if len(items) > len(rows):
        raise ValueError(f"{len(items)} items need at least as many rows to stand before, got {len(rows)}")
    targets = sorted(rng.sample(range(len(rows)), len(items)))
    out: list[R] = []
    j = 0
    for i, row in enumerate(rows):
        if j < len(targets) and targets[j] == i:
            out.append(items[j])
            j += 1
        out.append(row)
    return out


def gold_target(answer_prefix: str, outputs: Sequence[str]) -> tuple[str, int]:
    """The gold continuation of the input (answer prefix, a space unless the prefix ends with one, the outputs joined
    by ", ") and the character offset where the answer list starts inside it. The RULER loader's target."""
    sep = "" if (answer_prefix and answer_prefix[-1].isspace()) else " "
    head = answer_prefix + sep
    return head + ", ".join(outputs), len(head)


def input_budget(counter, budget: int, answer_prefix: str, outputs: Sequence[str], tokens_to_generate: int,
                 reserve_gold: bool) -> int:
    """Tokens allowed for input + answer prefix. ``budget`` = max_seq_length - tokens_to_generate (- template tokens):
    upstream's rule. With ``reserve_gold``, when the gold answer (as ``gold_target`` writes it after the prefix) has
    more tokens than ``tokens_to_generate`` (vt_h10_c1's eleven names), its own tokens are kept free instead, so that
    input + prefix + gold answer fits max_seq_length as well."""
    if not reserve_gold:
        return budget
    target, _ = gold_target(answer_prefix, outputs)
    with_gold, prefix = counter.units([target, answer_prefix])  # short texts: one batched call, memoised
    return budget - max(0, with_gold - prefix - tokens_to_generate)


@dataclass
class Evidence:
    sentence: str
    context_span: tuple[int, int]
    sentence_index: int
    title: Optional[str] = None
    doc_index: Optional[int] = None
    document_number: Optional[int] = None
    hop: Optional[int] = None  # the reasoning step it supports (1, 2, ...: hotpotqa_long's question_decomposition)


@dataclass
class ContextBuilder:
    """Concatenates pieces with a separator, recording the span of evidence pieces."""

    sep: str
    parts: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    _len: int = 0

    def add(self, text: str, *, evidence: bool = False, unit_index: Optional[int] = None, sep: Optional[str] = None,
            **meta) -> int:
        """Append one piece after the separator (``sep`` overrides the builder's); return its start offset. Evidence
        spans cover the piece stripped of outer whitespace."""
        if self.parts:
            sep = self.sep if sep is None else sep
            self.parts.append(sep)
            self._len += len(sep)
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
        rec = {"title": ev.title, "doc_index": ev.doc_index, "document_number": ev.document_number,
               "sentence_index": ev.sentence_index, "sentence": ev.sentence, "context_span": [s, e],
               "span": span, "snippet": snippet}
        if ev.hop is not None:  # only where steps are known: the files of the other tasks stay as they were
            rec["hop"] = ev.hop
        out.append(rec)
    return out


def answer_token_position(counter, text: str, outputs: list[str]) -> Optional[int]:
    """Tokens of ``text`` before the first occurrence of ``outputs[0]`` (upstream niah's definition); null if absent."""
    if not outputs:
        return None
    pos = text.find(outputs[0])
    return None if pos < 0 else (counter.count(text[:pos]) if pos else 0)


def make_record(index: int, prompt: Prompt, outputs: list[str], answer_prefix: str, n_tokens: int,
                tokens_to_generate: int, template_tokens: int, token_position: Optional[int],
                tokenizer: Optional[dict] = None) -> dict:
    """One output line. ``n_tokens`` = tokens of input + answer prefix (upstream counts the prompt with its prefix)."""
    # Key order is the field table of docs/ruler.md (+ tokenizer): lines serialise identically run to run.
    length = n_tokens + tokens_to_generate
    record = {"index": index, "input": prompt.input, "outputs": list(outputs), "length": length,
              "length_w_model_temp": length + template_tokens, "answer_prefix": answer_prefix,
              "token_position_answer": token_position, "needle_spans": needle_span_records(prompt)}
    if tokenizer is not None:
        record["tokenizer"] = dict(tokenizer)
    return record
