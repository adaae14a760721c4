"""Retrieval data in memory: one ``RetrievalSplit`` per (dataset, split), whatever it was read from (a FlagEmbedding
or BEIR folder, or the contexts of an attribution dataset)."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional

from ctxbench.datasets.base import Paths
from ctxbench.core.part import Part


@dataclass
class RetrievalSplit:
    """``corpus`` rows: ``id``, ``title``, ``text``; ``queries`` rows: ``id``, ``text``; ``qrels``: ``{qid: {docid:
    relevance}}``. ``groups``: None when every query searches the whole corpus; otherwise ``(corpus indices, query
    indices)`` pairs, each group's queries searching only its own documents (context retrieval: one example each)."""

    dataset: str
    split: str
    corpus: list[dict]
    queries: list[dict]
    qrels: dict[str, dict[str, int]]
    groups: Optional[list[tuple[list[int], list[int]]]] = None
    source: str = ""  # where it came from (a folder, a file), for messages and the manifest

    @property
    def column(self) -> str:
        """The report column: ``<dataset>-<split>``."""
        return f"{self.dataset}-{self.split}"

    def fingerprint(self) -> str:
        """sha256 of the corpus, the queries and the grouping: what a stored search result was computed on."""
        h = hashlib.sha256()
        for kind, rows, fields in (("corpus", self.corpus, ("id", "title", "text")),
                                   ("queries", self.queries, ("id", "text"))):
            h.update(f"{kind}:{len(rows)}\n".encode())
            for r in rows:
                for f in fields:
                    b = str(r.get(f) or "").encode("utf-8")
                    h.update(len(b).to_bytes(8, "little") + b)
        for docs, qs in self.groups or ():
            h.update(f"group:{docs}:{qs}\n".encode())
        return h.hexdigest()


def document_text(row: dict) -> str:
    """The text a retriever and a reranker see: ``(title + " " + text).strip()`` (FlagEmbedding, BEIR)."""
    return f"{row.get('title') or ''} {row.get('text') or ''}".strip()


class RetrievalData(Part, ABC):
    """A dataset kind that holds retrieval data itself (corpus, queries, qrels), as opposed to attribution datasets,
    whose contexts the retrieval mode turns into per-example corpora."""

    name: str

    @abstractmethod
    def load_splits(self, paths: Paths) -> list[RetrievalSplit]:
        """Every selected (dataset, split), read and checked."""
