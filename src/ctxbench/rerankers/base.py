"""The Reranker interface (the ``reranker`` config group): (query, document) pairs in, relevance scores out.

A reranker is a dataclass reached by ``_target_`` from ``conf/reranker/<name>.yaml``; its fields are its parameters and
``__post_init__`` refuses bad values with a ``ValueError`` naming the parameter. The retrieval mode scores the top
``rerank_top_k`` hits of each query with ``score`` and re-sorts them (docs/retrieval.md#rerankers).

Rerankers that run the causal LM of the ``model`` group (``needs_lm``) get it through ``use_lm(loaded_lm)``, as the
generators do; the others load their own model on first use. ``name`` labels the report row and the search-results
folder; ``settings()`` (``ctxbench.core.part``: the fields that are not ``neutral`` plus ``identity()``, the model's
files and dtype) is recorded beside the search results, so a stale result made with other settings is refused rather
than mixed in.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Optional, Sequence

import numpy as np
from ctxbench.core.part import Part, refuse

Pair = tuple[str, str]


class Reranker(Part, ABC):
    """Subclasses are dataclasses (their fields are the parameters)."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The report's "Reranker" column and the search-results folder name."""

    @abstractmethod
    def score(self, pairs: Sequence[Pair]) -> np.ndarray:
        """One float64 relevance per ``(query text, document text)`` pair, higher is better; batches internally."""


def check_pairs(pairs: Sequence[Pair]) -> list[Pair]:
    """The pairs as a list of two strings each; anything else is a ``ValueError`` naming the pair."""
    out = []
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise ValueError(f"pairs[{i}]: expected (query text, document text), got {pair!r}")
        out.append((pair[0], pair[1]))
    return out


def instruct(fmt: str, instruction: Optional[str], text: str) -> str:
    """FlagEmbedding's instruction rule: ``fmt.format(instruction, text)`` with a literal ``\\n`` in ``fmt`` read as a
    newline; no instruction leaves ``text`` as is."""
    if instruction is None:
        return text
    return fmt.replace("\\n", "\n").format(instruction, text)


def check_format(name: str, fmt: str) -> None:
    """An instruction format must have exactly the two ``{}`` slots (instruction, then text)."""
    try:
        probe = fmt.format("\x00I", "\x00T")
    except (IndexError, KeyError, ValueError):
        probe = ""
    if probe.find("\x00I") < 0 or probe.find("\x00T") < probe.find("\x00I"):
        raise refuse(name, fmt, "needs two {} slots (instruction, then text)")
