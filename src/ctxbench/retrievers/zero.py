"""ZeroRetriever: no in-context examples (0-shot, or examples written into the template itself)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ctxbench.retrievers.base import Retrieved, Retriever, Row


@dataclass(kw_only=True)
class ZeroRetriever(Retriever):
    """``[]`` for every row, whatever ``k``; the rendered in-context block is the empty string."""

    name: ClassVar[str] = "zero"

    def default_k(self) -> int:
        return 0

    def _retrieve(self, queries: list[Row], k: int) -> list[Retrieved]:
        return [Retrieved([], []) for _ in queries]
