"""RandomRetriever: ``ice_num`` distinct pool rows drawn uniformly for each query, reproducibly and shard-independently.

Unlike OpenCompass (which reseeds numpy's global generator and draws the rows in sequence, so a row's examples
change when the data is split into shards), each row is drawn from its own generator seeded by ``(seed, row id)``
(``ctxbench.retrievers.base.row_rng``); no global generator is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ctxbench.core.part import param
from ctxbench.retrievers.base import Retrieved, Retriever, Row, rank_scores, row_id, row_rng


@dataclass(kw_only=True)
class RandomRetriever(Retriever):
    """``ice_num`` rows per query (``ice_num`` > pool refused); ``seed`` (43, OpenCompass's default);
    ``exclude_self``: never pick the pool row with the query's id (when pool and test data are the same rows); the
    pool must then hold ``ice_num + 1`` rows. The draw's order is the prompt order."""

    name: ClassVar[str] = "random"

    ice_num: int = param(1, ge=0)
    seed: int = 43
    exclude_self: bool = False

    def _check_pool(self, n: int) -> None:
        super()._check_pool(n)
        if self.exclude_self and self.ice_num > n - 1:
            raise ValueError(f"ice_num={self.ice_num} with exclude_self needs a pool of at least {self.ice_num + 1} "
                             f"rows, got {n}")

    def _retrieve(self, queries: list[Row], k: int) -> list[Retrieved]:
        n = len(self.pool)
        out = []
        for q in queries:
            own = self.self_index(q) if self.exclude_self else None
            available = n - (own is not None)
            if k > available:
                raise ValueError(f"k={k} is larger than the {available} pool rows available to query {row_id(q)!r}")
            rng = row_rng(self.seed, row_id(q))
            if own is None:
                picked = rng.choice(n, size=k, replace=False)
            else:
                picked = rng.choice(n - 1, size=k, replace=False)
                picked = np.where(picked >= own, picked + 1, picked)  # skip the query's own row
            out.append(Retrieved([int(i) for i in picked], rank_scores(k)))
        return out
