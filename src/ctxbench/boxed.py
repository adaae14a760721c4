"""The format check of the sampling stage: split "chain of thought + \\box{answer}" into its two parts
(docs/sampling.md).

``split_boxed_generation(text)`` returns a ``BoxedSplit`` or a ``Rejection`` whose ``reason`` is one of the short,
stable strings in ``REJECTION_REASONS`` (the stage counts them). Rules (FlashTrace's format check, with balanced
braces):

- a box is ``\\box`` or ``\\boxed``, optional whitespace, then an opening brace, ASCII ``{`` or full-width ``｛``; it
  ends at the brace (``}`` or ``｝``) that balances it, so nested braces belong to the answer; backslash-escaped braces
  (``\\{``, ``\\}``) are literal characters and do not count;
- boxes are found left to right, a box inside another one is part of the outer answer, and the LAST box is the answer;
  it must end the text (only whitespace after it): "thinking \\box{a} more \\box{b}" gives answer ``b`` and thinking
  "thinking \\box{a} more" (an earlier box stays in the thinking text, verbatim);
- rejected: an empty or blank text (``empty_generation``), no box (``no_box``), a last box whose braces never balance
  (``unbalanced_braces``), blank box content (``empty_box``), anything but whitespace after the box
  (``text_after_box``), blank text before the box (``empty_thinking``);
- ``thinking`` is the text before the box, stripped; ``answer`` the box content, stripped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Union

EMPTY_GENERATION = "empty_generation"
NO_BOX = "no_box"
UNBALANCED_BRACES = "unbalanced_braces"
EMPTY_BOX = "empty_box"
TEXT_AFTER_BOX = "text_after_box"
EMPTY_THINKING = "empty_thinking"
REJECTION_REASONS = (EMPTY_GENERATION, NO_BOX, UNBALANCED_BRACES, EMPTY_BOX, TEXT_AFTER_BOX, EMPTY_THINKING)

_BOX_OPEN = re.compile(r"\\box(?:ed)?\s*[{｛]")
_OPEN = "{｛"
_CLOSE = "}｝"


@dataclass(frozen=True)
class BoxedSplit:
    """An accepted generation: ``thinking`` and ``answer`` (both stripped, non-empty); ``box_start``/``box_end`` are the
    characters of the whole box (``\\box{...}``) in the generation, end exclusive."""

    thinking: str
    answer: str
    box_start: int
    box_end: int

    ok = True


@dataclass(frozen=True)
class Rejection:
    """A refused generation: ``reason`` is one of ``REJECTION_REASONS``; ``detail`` a short human-readable note."""

    reason: str
    detail: str = ""

    ok = False


def _closing_brace(text: str, open_at: int) -> Optional[int]:
    """Index of the brace closing the one at ``open_at`` (balanced; escaped braces skipped), None if it never closes."""
    depth = 0
    i = open_at
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] in _OPEN + _CLOSE:
            i += 2
            continue
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def find_boxes(text: str) -> list[tuple[int, int, Optional[int]]]:
    """Top-level boxes left to right as ``(box_start, content_start, closing_brace_index or None)``; a box that never
    closes is the last one found (it swallows the rest of the text)."""
    boxes = []
    pos = 0
    while True:
        m = _BOX_OPEN.search(text, pos)
        if m is None:
            return boxes
        close = _closing_brace(text, m.end() - 1)
        boxes.append((m.start(), m.end(), close))
        if close is None:
            return boxes
        pos = close + 1


def split_boxed_generation(text: Optional[str]) -> Union[BoxedSplit, Rejection]:
    """Split a generation into thinking and boxed answer, or say why it is refused (module docstring)."""
    if not text or not text.strip():
        return Rejection(EMPTY_GENERATION, "the generation is empty")
    boxes = find_boxes(text)
    if not boxes:
        return Rejection(NO_BOX, "no \\box{...} or \\boxed{...} in the generation")
    start, content_start, close = boxes[-1]
    if close is None:
        return Rejection(UNBALANCED_BRACES, f"the box at character {start} is never closed")
    answer = text[content_start:close].strip()
    if not answer:
        return Rejection(EMPTY_BOX, f"the box at character {start} is empty")
    trailing = text[close + 1:].strip()
    if trailing:
        return Rejection(TEXT_AFTER_BOX, f"text after the box: {trailing[:40]!r}")
    thinking = text[:start].strip()
    if not thinking:
        return Rejection(EMPTY_THINKING, "nothing before the box")
    return BoxedSplit(thinking=thinking, answer=answer, box_start=start, box_end=close + 1)
