"""SlidingWindowRetriever: the ``k`` pool rows before the query's position (OpenCompass's behaviour).

The position is the query row's ``position_field`` (default ``index``: its position in the whole dataset, which
``ctxbench.retrievers.pool.example_rows`` sets), never its place in the current batch, so sharding changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ctxbench.core.part import param, refuse
from ctxbench.retrievers.base import Retrieved, Retriever, Row, rank_scores, row_id


@dataclass(kw_only=True)
class SlidingWindowRetriever(Retriever):
    """Row at position ``i`` gets pool rows ``i-k .. i-1`` in that order; the first rows (``i < k``) are padded in
    front with the last pool rows, as OpenCompass does (``[n-(k-i) .. n-1] + [0 .. i-1]``). Positions past the end
    of the pool wrap around (indices modulo the pool size); OpenCompass would fail there."""

    name: ClassVar[str] = "sliding_window"

    k: int = param(ge=0)
    position_field: str = "index"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.position_field:
            raise refuse("position_field", self.position_field, "must name the query rows' position field")

    def default_k(self) -> int:
        return self.k

    def _check_pool(self, n: int) -> None:
        if self.k > n:
            raise ValueError(f"k={self.k} is larger than the pool ({n} rows)")

    def _retrieve(self, queries: list[Row], k: int) -> list[Retrieved]:
        n = len(self.pool)
        out = []
        for q in queries:
            pos = q.get(self.position_field)
            if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
                raise ValueError(f"query {row_id(q)!r}: field {self.position_field!r} must hold the row's position "
                                 f"in the dataset (an integer >= 0), got {pos!r}")
            idx = [(pos - k + j) % n for j in range(k)]  # i-k .. i-1; negatives wrap to the pool's last rows
            out.append(Retrieved(idx, rank_scores(k)))
        return out
