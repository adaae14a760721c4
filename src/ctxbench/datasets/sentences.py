"""Sentence segmentation with character spans.

pysbd (rule-based, offline, no model download; the "Golden Rules" English segmenter) does the splitting. Its segments,
with ``clean=False``, concatenate back to the input; we locate each one with a moving cursor (robust to repeated
sentences) and trim surrounding whitespace so a span is exactly the sentence text.
"""

from __future__ import annotations

from functools import lru_cache

import pysbd


@lru_cache(maxsize=4)
def _segmenter(language: str) -> pysbd.Segmenter:
    return pysbd.Segmenter(language=language, clean=False)


def split_sentences(text: str, language: str = "en") -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the sentences of ``text``, in order, whitespace trimmed, never overlapping.

    Line breaks also end a sentence: RULER haystacks and documents are line-structured, and a needle on its own line
    must not be merged with the line before it.
    """
    spans: list[tuple[int, int]] = []
    line_start = 0
    for line in text.split("\n"):
        if line.strip():
            cursor = 0
            for seg in _segmenter(language).segment(line):
                found = line.find(seg, cursor)
                if found < 0:  # pysbd altered the text; fall back to the cursor position
                    found = cursor
                start, end = found, min(len(line), found + len(seg))
                cursor = end
                piece = line[start:end]
                lead = len(piece) - len(piece.lstrip())
                trail = len(piece) - len(piece.rstrip())
                if end - trail > start + lead:
                    spans.append((line_start + start + lead, line_start + end - trail))
        line_start += len(line) + 1
    return spans


def sentences_overlapping(spans: list[tuple[int, int]], targets: list[tuple[int, int]]) -> list[int]:
    """Sorted indices of the sentence spans that overlap any target ``[s, e)`` interval."""
    hits = set()
    for i, (a, b) in enumerate(spans):
        for s, e in targets:
            if a < e and s < b:
                hits.add(i)
                break
    return sorted(hits)


def join_sentences(sentences) -> tuple[str, tuple[int, ...]]:
    """Sentences joined as written, with one space between two where neither side has whitespace (HotpotQA-style
    paragraphs store most sentences with their leading space, but not all: joined bare, ``nobleman.Born`` would be one
    sentence to every segmenter); the offset of each sentence in the joined text."""
    parts: list[str] = []
    starts: list[int] = []
    pos = 0
    for sent in sentences:
        if pos and sent and not parts[-1][-1:].isspace() and not sent[0].isspace():
            parts.append(" ")
            pos += 1
        starts.append(pos)
        if sent:
            parts.append(sent)
            pos += len(sent)
    return "".join(parts), tuple(starts)
