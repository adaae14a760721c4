"""Span attachment (FlashTrace's span rule): a judged-correct generation becomes a CachedExample with its token spans.

``target = thinking + "\\n" + answer``; the answer's character span is its LAST occurrence in the target; the sink span
is the closed interval of target tokens (``tokenizer(target, add_special_tokens=False)``, offset mapping) overlapping
it; ``thinking_span = [0, sink_start - 1]`` (null when the answer starts the target); ``indices_to_explain =
sink_span``. The metadata records the character span and the tokenizer, so ``run_exp`` keeps the spans for the same
tokenizer and redoes them for another one (``ctxbench.evaluation.example_spans``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from ctxbench.example import CachedExample
from ctxbench.utils.spans import answer_token_spans, tokenizer_name


def build_target(thinking: str, answer: str) -> str:
    return thinking + "\n" + answer


def attach_spans(row: CachedExample, thinking: str, answer: str, tokenizer, **metadata: Any
                 ) -> Optional[CachedExample]:
    """The cache line for ``row`` (a raw example: prompt, metadata) with ``target``, ``sink_span``, ``thinking_span``
    and ``indices_to_explain`` set. ``metadata`` (e.g. ``judge_response=...``, ``generation=...``) is merged over the
    row's; the function adds ``boxed_answer``, ``sink_char_span``, ``span_tokenizer`` and ``reference_answer`` (kept
    from the row unless given). None when no target token overlaps the answer (the stage counts it as refused)."""
    if not answer:
        raise ValueError("attach_spans: the answer is empty")
    target = build_target(thinking, answer)
    start = target.rfind(answer)
    end = start + len(answer)
    sink, think, _ = answer_token_spans(tokenizer, target, start, end)
    if sink is None:
        return None
    md = dict(row.metadata)
    md.update(metadata)
    md["boxed_answer"] = answer
    md["sink_char_span"] = [start, end]
    md["span_tokenizer"] = tokenizer_name(tokenizer)
    md.setdefault("reference_answer", row.metadata.get("reference_answer", row.metadata.get("answer")))
    return replace(row, target=target, sink_span=list(sink), thinking_span=list(think) if think else None,
                   indices_to_explain=list(sink), metadata=md)
