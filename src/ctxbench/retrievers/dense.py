"""DenseRetriever (OpenCompass's TopkRetriever): embed pool and queries with an ``Embedder``, rank by inner product
with Faiss.

The pool is embedded once at ``fit`` (through the embedder's corpus cache when it has a ``cache_dir``) and added to a
Faiss index made by ``faiss.index_factory(dim, faiss_index, METRIC_INNER_PRODUCT)``: ``Flat`` (the default) is exact;
``IVF<n>,Flat`` or ``HNSW<m>`` trade exactness for speed on large corpora. With normalised embeddings (the default) the
score is the cosine similarity. All queries are embedded and searched in one call (Faiss takes its BLAS path for large
query blocks). Hits with equal scores are ordered by pool index. Embeddings depend slightly (about 1e-7) on which texts
share a batch, so two hits whose scores differ by less than that can swap between runs with different batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ctxbench.models.embedder import Embedder
from ctxbench.retrievers.base import Retrieved, Row, TextRetriever, check_ice_num, exclusions


def make_index(dim: int, spec: str):
    import faiss

    try:
        return faiss.index_factory(int(dim), spec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise ValueError(f"faiss_index={spec!r}: not a Faiss index description ({str(exc).splitlines()[0]})") from None


@dataclass(kw_only=True)
class DenseRetriever(TextRetriever):
    """Top ``ice_num`` pool rows by embedding similarity (module doc). ``exclude_self``: never return the pool row
    with the query's id (the next best row fills its place)."""

    name: ClassVar[str] = "dense"

    ice_num: int = 1
    embedder: Embedder = field(default_factory=Embedder)
    faiss_index: str = "Flat"
    exclude_self: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ice_num(self.ice_num)
        if isinstance(self.embedder, dict):  # a plain mapping (not instantiated by Hydra)
            self.embedder = Embedder(**{k: v for k, v in self.embedder.items() if k != "_target_"})
        if not isinstance(self.embedder, Embedder):
            raise ValueError(f"embedder: expected an Embedder, got {type(self.embedder).__name__}")
        if not self.faiss_index:
            raise ValueError("faiss_index: must be a Faiss index description such as Flat")

    def _fit(self, rows: list[Row]) -> None:
        emb = np.ascontiguousarray(self.embedder.encode_corpus(self.pool_texts()), dtype=np.float32)
        index = make_index(emb.shape[1], self.faiss_index)
        if not index.is_trained:
            index.train(emb)
        index.add(emb)
        self.embeddings = emb
        self.index = index

    def embed_queries(self, queries: list[Row]) -> np.ndarray:
        return np.ascontiguousarray(self.embedder.encode_queries(self.query_texts(queries)), dtype=np.float32)

    def search(self, q_emb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """One Faiss search for all query embeddings: ``(scores, indices)``, each ``(n_queries, k)``; -1 marks a
        missing hit (approximate indexes only)."""
        k = min(k, self.index.ntotal)
        if k == 0:
            return np.zeros((len(q_emb), 0), np.float32), np.zeros((len(q_emb), 0), np.int64)
        return self.index.search(np.ascontiguousarray(q_emb, dtype=np.float32), k)

    def _retrieve(self, queries: list[Row], k: int) -> list[Retrieved]:
        own = exclusions(self, queries, self.exclude_self)
        extra = int(any(o is not None for o in own))
        scores, idx = self.search(self.embed_queries(queries), k + extra)
        out = []
        for r in range(len(queries)):
            if own[r] is not None and k > len(self.pool) - 1:
                raise ValueError(f"k={k}: only {len(self.pool) - 1} pool rows besides query {queries[r]['id']!r}")
            hits = [(float(s), int(i)) for s, i in zip(scores[r], idx[r]) if i >= 0 and i != own[r]]
            hits.sort(key=lambda h: (-h[0], h[1]))  # equal scores: lower pool index first
            hits = hits[:k]
            out.append(Retrieved([i for _, i in hits], [s for s, _ in hits]))
        return out
