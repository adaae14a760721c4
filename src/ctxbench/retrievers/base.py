"""The Retriever interface (docs/retrievers.md): fit on a pool of rows, then rank the pool for each query.

One interface serves both users of the ``retriever`` group: the sampling stage asks for in-context examples from a pool
of worked examples (OpenCompass / AISBench ``openicl`` contract), and the retrieval mode ranks a corpus
for each query. A retriever is a dataclass reached by ``_target_`` from ``conf/retriever/<name>.yaml``; its fields are
its only parameters; their bounds and choices are declared on the fields (``ctxbench.core.part.param``) and a bad value
is refused when the retriever is built, with a ``ConfigError`` naming the parameter.

Rows are mappings (dicts) with a stable string ``id`` and text fields. A retriever reads the text of a pool row from
``fields`` and of a query row from ``query_fields`` (default: the same fields): the non-empty values joined by one space
and stripped, as BEIR/FlagEmbedding encode ``title + " " + text``. Results are pool indices (positions in the fitted
pool) with scores, best first. Everything is deterministic and never touches a global random generator: a retriever
that draws at random draws each row from its own generator seeded by ``(seed, row id)``, so a row's result does not
depend on the order of the queries, on sharding, or on the other rows.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Mapping, Optional, Protocol, Sequence, runtime_checkable

import numpy as np
from ctxbench.core.part import Part

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Retrieved:
    """The hits of one query: pool indices, best first, and their scores (higher is better). Retrievers that do not
    score (fixk, random, sliding_window, votek) give ``k - rank``, so sorting by score keeps their order."""

    indices: list[int]
    scores: list[float]

    def __len__(self) -> int:
        return len(self.indices)


@runtime_checkable
class CountsExamples(Protocol):
    """A retriever that gives every row a fixed number of examples (OpenCompass's ``ice_num``): the default ``k`` of
    ``retrieve``, and a pool smaller than it is refused when fitted."""

    ice_num: int


@runtime_checkable
class EncodesCorpus(Protocol):
    """A retriever that embeds its pool with an ``embedder`` (the report's "Model" column names both) and can
    encode one shard of a corpus into the embedding cache (``mode=retrieval`` with ``shard.*``,
    docs/scale-out.md)."""

    embedder: Any

    def encode_corpus_shard(self, pools: Sequence[Sequence[Row]], shard: Any) -> int: ...


def row_id(row: Row, where: str = "row") -> str:
    """The row's ``id`` as a string; a row without one is an error naming ``where``."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected a mapping with an 'id' and text fields, got {type(row).__name__}")
    if row.get("id") is None or str(row["id"]) == "":
        raise ValueError(f"{where}: has no 'id' (every pool and query row needs a stable id)")
    return str(row["id"])


def row_text(row: Row, fields: Sequence[str]) -> str:
    """The text a retriever reads from ``row``: the non-empty values of ``fields`` joined by one space, stripped
    (a missing field counts as empty)."""
    parts = []
    for name in fields:
        value = row.get(name)
        if value is None:
            continue
        value = str(value).strip()
        if value:
            parts.append(value)
    return " ".join(parts).strip()


def row_seed(seed: int, rid: str) -> np.random.SeedSequence:
    """The seed of one row's own generator: ``(seed, sha256(row id))``; Python's salted ``hash`` is never used."""
    digest = hashlib.sha256(str(rid).encode("utf-8")).digest()
    return np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, *np.frombuffer(digest[:16], dtype=np.uint32)])


def row_rng(seed: int, rid: str) -> np.random.Generator:
    return np.random.default_rng(row_seed(seed, rid))


def top_k(scores: np.ndarray, k: int, exclude: Optional[Iterable[int]] = None) -> tuple[np.ndarray, np.ndarray]:
    """Indices and scores of the ``k`` largest entries of a 1-D score vector, ties broken by the lower index, so the
    result is exactly what a full stable sort would give. ``exclude``: indices that may not appear."""
    s = np.asarray(scores, dtype=np.float64)
    if exclude is not None:
        s = s.copy()
        s[list(exclude)] = -np.inf
    n = s.shape[0]
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    if k < n:
        kth = np.partition(-s, k - 1)[k - 1]  # -(k-th largest)
        cand = np.flatnonzero(-s <= kth)  # every entry at least as large, ties at the boundary included
    else:
        cand = np.arange(n)
    order = cand[np.lexsort((cand, -s[cand]))][:k]
    return order.astype(np.int64), s[order]


@dataclass(kw_only=True)
class Retriever(Part, ABC):
    """Fit on a pool, then ``retrieve(queries, k)``. Subclasses are dataclasses whose fields are their parameters;
    one that scores with the causal LM (mdl) sets ``needs_lm`` and gets it through ``use_lm``."""

    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        self._pool: Optional[list[Row]] = None
        self._ids: list[str] = []
        self._index_of: dict[str, int] = {}

    # --- the interface -------------------------------------------------------------------------------------------

    def fit(self, pool: Sequence[Row]) -> "Retriever":
        """Index the pool (its rows' ids must be unique); returns the retriever."""
        self._fit(self._set_pool(pool))
        return self

    def _set_pool(self, pool: Sequence[Row]) -> list[Row]:
        """Check and keep the pool's rows and ids (what ``fit`` does before indexing)."""
        rows = list(pool)
        ids = [row_id(r, f"pool row {i}") for i, r in enumerate(rows)]
        seen: dict[str, int] = {}
        for i, rid in enumerate(ids):
            if rid in seen:
                raise ValueError(f"pool rows {seen[rid]} and {i} share the id {rid!r}; pool ids must be unique")
            seen[rid] = i
        self._pool, self._ids, self._index_of = rows, ids, seen
        self._check_pool(len(rows))
        return rows

    def retrieve_grouped(self, groups: Sequence[tuple[Sequence[Row], Sequence[Row]]], k: int
                         ) -> list[list[Retrieved]]:
        """For each ``(pool, queries)`` group, its queries ranked against its own pool only (``k`` capped at that
        pool's size); indices are positions in the group's pool. The retriever ends fitted on the last group.
        Subclasses may share work across groups (dense: one encoding call for all of them)."""
        return [self.fit(pool).retrieve(queries, min(k, len(pool))) for pool, queries in groups]

    def retrieve(self, queries: Sequence[Row], k: Optional[int] = None) -> list[Retrieved]:
        """For each query row, in order: up to ``k`` pool indices with scores, best first (``k`` None: the
        retriever's own count, e.g. ``ice_num``). ``k`` larger than the pool is refused."""
        if self._pool is None:
            raise RuntimeError(f"{type(self).__name__}: call fit(pool) before retrieve()")
        k = self.default_k() if k is None else int(k)
        if k < 0:
            raise ValueError(f"k={k}: must be >= 0")
        if k > len(self._pool):
            raise ValueError(f"k={k} is larger than the pool ({len(self._pool)} rows)")
        rows = list(queries)
        for i, r in enumerate(rows):
            row_id(r, f"query row {i}")
        if not rows:
            return []
        out = self._retrieve(rows, k)
        assert len(out) == len(rows)
        return out

    def default_k(self) -> int:
        """How many examples a row gets when ``retrieve`` is called without ``k``."""
        return int(self.ice_num) if isinstance(self, CountsExamples) else 0

    def use_template(self, template) -> None:
        """The prompt template the sampling stage renders with (only retrievers that score prompts, mdl, read it)."""

    # --- the pool ------------------------------------------------------------------------------------------------

    @property
    def pool(self) -> list[Row]:
        if self._pool is None:
            raise RuntimeError(f"{type(self).__name__}: not fitted")
        return self._pool

    @property
    def pool_ids(self) -> list[str]:
        return list(self._ids)

    def ids_of(self, hits: Retrieved) -> list[str]:
        """The pool ids of one query's hits (what a run records)."""
        return [self._ids[i] for i in hits.indices]

    def self_index(self, query: Row) -> Optional[int]:
        """The pool index of the row with the query's id (None when the query is not in the pool)."""
        return self._index_of.get(str(query.get("id")))

    # --- subclasses ----------------------------------------------------------------------------------------------

    def _check_pool(self, n: int) -> None:
        """Refuse a pool this retriever's settings cannot serve (e.g. ``ice_num`` > pool); called by ``fit``."""
        if isinstance(self, CountsExamples) and self.ice_num > n:
            raise ValueError(f"ice_num={self.ice_num} is larger than the pool ({n} rows)")

    def _fit(self, rows: list[Row]) -> None:
        """Build the index (nothing by default)."""

    @abstractmethod
    def _retrieve(self, queries: list[Row], k: int) -> list[Retrieved]:
        ...


@dataclass(kw_only=True)
class TextRetriever(Retriever):
    """A retriever that reads text. ``fields``: the pool rows' fields it tokenises or embeds; ``query_fields``: the
    query rows' (None: the same as ``fields``). BEIR-style corpora: ``fields=[title, text]``,
    ``query_fields=[text]``."""

    fields: list[str] = field(default_factory=lambda: ["prompt"])
    query_fields: Optional[list[str]] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.fields = _field_list(self.fields, "fields")
        if self.query_fields is not None:
            self.query_fields = _field_list(self.query_fields, "query_fields")

    def pool_texts(self) -> list[str]:
        texts = [row_text(r, self.fields) for r in self.pool]
        if texts and not any(texts):
            # a pool of another shape under the configs' default fields: say so rather than rank empty texts
            raise ValueError(f"fields={self.fields}: no pool row has text in these fields (the first row has "
                             f"{sorted(self.pool[0])}); set the retriever's fields")
        return texts

    def query_texts(self, queries: Sequence[Row]) -> list[str]:
        return [row_text(q, self.query_fields or self.fields) for q in queries]


def _field_list(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    value = list(value)
    if not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{name}={value!r}: expected a non-empty list of field names")
    return value


def rank_scores(n: int) -> list[float]:
    """``k - rank`` for retrievers that rank without scoring."""
    return [float(n - r) for r in range(n)]


def exclusions(retriever: Retriever, queries: Sequence[Row], exclude_self: bool) -> list[Optional[int]]:
    """Per query, the pool index to leave out (its own row) when ``exclude_self``."""
    if not exclude_self:
        return [None] * len(queries)
    return [retriever.self_index(q) for q in queries]
