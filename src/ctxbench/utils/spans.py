"""Character spans -> token spans, with a tokenizer's offset mapping (spans are tied to the tokenizer that made
them)."""

from __future__ import annotations

from typing import Optional, Sequence


def tokens_overlapping(offsets: Sequence[Sequence[int]], start: int, end: int) -> list[int]:
    """Indices of tokens whose character interval ``[a, b)`` overlaps ``[start, end)``; zero-width tokens never do."""
    return [i for i, (a, b) in enumerate(offsets) if b > a and a < end and start < b]


def answer_token_spans(tokenizer, target: str, char_start: int, char_end: int
                       ) -> tuple[Optional[list[int]], Optional[list[int]], int]:
    """Sink span (closed, tokens of ``target[char_start:char_end]``), thinking span ``[0, sink_start - 1]`` (None when
    the answer starts the target) and the target's token count, in ``tokenizer(target, add_special_tokens=False)``
    coordinates. The sink is None when no token overlaps the answer."""
    enc = tokenizer(target, add_special_tokens=False, return_offsets_mapping=True)
    hit = tokens_overlapping(enc["offset_mapping"], char_start, char_end)
    n = len(enc["input_ids"])
    if not hit:
        return None, None, n
    sink = [min(hit), max(hit)]
    thinking = [0, sink[0] - 1] if sink[0] > 0 else None
    return sink, thinking, n


def tokenizer_name(tokenizer) -> str:
    return str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
