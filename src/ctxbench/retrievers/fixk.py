"""FixKRetriever: the same pool rows, in the given order, for every query (k-shot)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ctxbench.core.part import refuse
from ctxbench.retrievers.base import Retrieved, Retriever, Row, rank_scores


@dataclass(kw_only=True)
class FixKRetriever(Retriever):
    """``fix_id_list``: pool indices, in prompt order. Every index is checked, negatives included: a negative one when
    the retriever is built, the upper bound when it is fitted (the first moment the pool is known), both before any
    retrieval; the message names the index and the range. ``retrieve(..., k)`` gives the first ``k`` of the list
    (``k`` None: all of it); every row gets its own copy."""

    name: ClassVar[str] = "fixk"

    fix_id_list: list[int]

    def __post_init__(self) -> None:
        super().__post_init__()
        ids = list(self.fix_id_list)
        for i in ids:
            if not isinstance(i, int) or isinstance(i, bool):
                raise refuse("fix_id_list", ids, f"every entry must be an integer, got {i!r}")
            if i < 0:
                raise refuse("fix_id_list", ids, f"index {i} is out of range of [0, len(pool))")
        self.fix_id_list = ids

    def default_k(self) -> int:
        return len(self.fix_id_list)

    def _check_pool(self, n: int) -> None:
        for i in self.fix_id_list:
            if not 0 <= i < n:
                raise ValueError(f"fix_id_list index {i} is out of range of [0, {n})")

    def _retrieve(self, queries: list[Row], k: int) -> list[Retrieved]:
        if k > len(self.fix_id_list):
            raise ValueError(f"k={k} is larger than fix_id_list ({len(self.fix_id_list)} indices)")
        chosen = self.fix_id_list[:k]
        return [Retrieved(list(chosen), rank_scores(len(chosen))) for _ in queries]
