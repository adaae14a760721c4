"""A retriever defined outside the library: pool rows ranked by the number of distinct words they share with the
query (ties: pool order), scored by ``num_workers`` threads. ``num_workers`` changes only how fast, so it is declared
``neutral``: stored search results made with 1 worker serve a rerun with 4. ``calls`` counts the ranking passes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ctxbench.core.part import neutral, param
from ctxbench.retrievers.base import Retrieved, TextRetriever, top_k


@dataclass(kw_only=True)
class OverlapRetriever(TextRetriever):
    name: ClassVar[str] = "overlap"
    calls: ClassVar[int] = 0

    ice_num: int = param(2, ge=0)
    lowercase: bool = True
    num_workers: int = neutral(1, ge=1)

    def _words(self, text: str) -> set[str]:
        return set((text.lower() if self.lowercase else text).split())

    def _fit(self, rows) -> None:
        self._pool_words = [self._words(t) for t in self.pool_texts()]

    def _retrieve(self, queries, k: int) -> list[Retrieved]:
        type(self).calls += 1

        def one(text: str) -> Retrieved:
            words = self._words(text)
            scores = np.array([len(words & p) for p in self._pool_words], dtype=np.float64)
            order, best = top_k(scores, k)
            return Retrieved([int(i) for i in order], [float(s) for s in best])

        with ThreadPoolExecutor(self.num_workers) as workers:
            return list(workers.map(one, self.query_texts(queries)))
