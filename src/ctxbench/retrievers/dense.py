"""DenseRetriever (OpenCompass's TopkRetriever): embed pool and queries with an ``Embedder``, rank by inner product
with Faiss.

The pool is embedded once at ``fit`` (through the embedder's corpus cache when it has a ``cache_dir``) and added to a
Faiss inner-product index (``ctxbench.retrievers.ann``): ``index: flat`` (the default) is exact; ``ivf`` or ``hnsw``
trade exactness for speed on large corpora; ``device`` puts it on a GPU when faiss has GPU support. With normalised
embeddings (the default) the score is the cosine similarity. All queries are embedded in one call and searched in
blocks of ``SEARCH_BLOCK`` (large enough for Faiss's BLAS path, small enough for the progress to move). Hits with equal
scores are ordered by pool index. Embeddings depend slightly (about 1e-7) on which texts share a batch, so two hits
whose scores differ by less than that can swap between runs with different batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np

from ctxbench.utils import progress
from ctxbench.models.embedder import Embedder
from ctxbench.core.part import param
from ctxbench.retrievers.ann import IndexSettings, build_index
from ctxbench.retrievers.base import Retrieved, Row, TextRetriever, exclusions, row_text
from ctxbench.core.shards import Shard

SEARCH_BLOCK = 4096


@dataclass(kw_only=True)
class DenseRetriever(TextRetriever):
    """Top ``ice_num`` pool rows by embedding similarity (module doc). ``exclude_self``: never return the pool row
    with the query's id (the next best row fills its place)."""

    name: ClassVar[str] = "dense"

    ice_num: int = param(1, ge=0)
    embedder: Embedder = field(default_factory=Embedder)
    index: str = "flat"  # flat | ivf | hnsw (ctxbench.retrievers.ann)
    nlist: int = 0  # ivf cells (0: about 4 sqrt(n))
    nprobe: int = 32  # ivf cells visited per query
    hnsw_m: int = 32
    ef_construction: int = 80
    ef_search: int = 128
    device: str = "cpu"  # where the index lives: cpu | cuda | cuda:N | auto (CPU when faiss has no GPU support)
    exclude_self: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.embedder, dict):  # a plain mapping (not instantiated by Hydra)
            self.embedder = Embedder(**{k: v for k, v in self.embedder.items() if k != "_target_"})
        if not isinstance(self.embedder, Embedder):
            raise ValueError(f"embedder: expected an Embedder, got {type(self.embedder).__name__}")
        self.index_settings = IndexSettings(self.index, self.nlist, self.nprobe, self.hnsw_m, self.ef_construction,
                                            self.ef_search, self.device)

    def _fit(self, rows: list[Row]) -> None:
        self._index_embeddings(self.embedder.encode_corpus(self.pool_texts()))

    def _index_embeddings(self, emb: np.ndarray) -> None:
        """Index the pool's embeddings (``fit`` and ``retrieve_grouped``); options extend it to reset per-pool state."""
        emb = np.ascontiguousarray(emb, dtype=np.float32)
        self.embeddings = emb
        self.faiss = build_index(emb, self.index_settings)

    def embed_queries(self, queries: list[Row]) -> np.ndarray:
        return np.ascontiguousarray(self.embedder.encode_queries(self.query_texts(queries)), dtype=np.float32)

    def search(self, q_emb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Faiss search for all query embeddings: ``(scores, indices)``, each ``(n_queries, k)``; -1 marks a missing
        hit (approximate indexes only). Queries go in blocks of ``SEARCH_BLOCK``, so that the progress shows."""
        k = min(k, self.faiss.ntotal)
        if k == 0:
            return np.zeros((len(q_emb), 0), np.float32), np.zeros((len(q_emb), 0), np.int64)
        q_emb = np.ascontiguousarray(q_emb, dtype=np.float32)
        scores, idx = [], []
        with progress.bar(len(q_emb), "search", "query") as bar:
            for s in range(0, len(q_emb), SEARCH_BLOCK):
                sc, ix = self.faiss.search(q_emb[s:s + SEARCH_BLOCK], k)
                scores.append(sc)
                idx.append(ix)
                bar.update(len(sc))
        return np.concatenate(scores), np.concatenate(idx)

    def retrieve_grouped(self, groups: Sequence[tuple[Sequence[Row], Sequence[Row]]], k: int
                         ) -> list[list[Retrieved]]:
        """As ``Retriever.retrieve_grouped``, with every group's pool encoded in one ``encode_corpus`` call (one
        cache entry) and every query in one ``encode_queries`` call; each group gets its own index."""
        groups = [(list(pool), list(queries)) for pool, queries in groups]
        q_texts = [row_text(q, self.query_fields or self.fields) for _, queries in groups for q in queries]
        p_emb = self.embedder.encode_corpus(self.corpus_texts([pool for pool, _ in groups]))
        q_emb = self.embedder.encode_queries(q_texts)
        out, p0, q0 = [], 0, 0
        for pool, queries in groups:
            self._set_pool(pool)
            self._index_embeddings(p_emb[p0:p0 + len(pool)])
            out.append(self._ranked(queries, min(k, len(pool)), q_emb[q0:q0 + len(queries)]))
            p0, q0 = p0 + len(pool), q0 + len(queries)
        return out

    def corpus_texts(self, pools: Sequence[Sequence[Row]]) -> list[str]:
        """The texts ``retrieve_grouped`` encodes for these pools, in one list (one embedding-cache entry)."""
        return [row_text(r, self.fields) for pool in pools for r in pool]

    def encode_corpus_shard(self, pools: Sequence[Sequence[Row]], shard: Shard) -> int:
        """Encode shard ``shard`` of what ``retrieve_grouped`` encodes for these pools into the embedding cache, where
        the unsharded search joins the shards (docs/scale-out.md); returns the rows encoded."""
        return len(self.embedder.encode_corpus_shard(self.corpus_texts(pools), shard))

    def _retrieve(self, queries: list[Row], k: int) -> list[Retrieved]:
        return self._ranked(queries, k, self.embed_queries(queries))

    def ranked_hits(self, queries: list[Row], q_emb: np.ndarray, n: int, need: int
                    ) -> list[list[tuple[float, int]]]:
        """Per query its ``n`` best pool rows (as many as there are) as ``(score, index)``, the query's own row left
        out with ``exclude_self`` (refused when fewer than ``need`` rows remain): decreasing score, equal scores by
        increasing pool index (docs/retrievers.md), the rule every dense option's candidate list follows. Faiss orders
        equal scores as it likes and may cut a tie at the ``n``-th hit, so the search widens until the hit after the
        ``n``-th scores strictly less (or the pool is exhausted)."""
        own = exclusions(self, queries, self.exclude_self)
        for r, o in enumerate(own):
            if o is not None and need > len(self.pool) - 1:
                raise ValueError(f"k={need}: only {len(self.pool) - 1} pool rows besides query {queries[r]['id']!r}")
        total = len(self.pool)
        width = min(n + 1 + int(any(o is not None for o in own)), total)
        while True:
            scores, idx = self.search(q_emb, width)
            hits = [sorted(((float(s), int(i)) for s, i in zip(scores[r], idx[r]) if i >= 0 and i != own[r]),
                           key=lambda h: (-h[0], h[1])) for r in range(len(queries))]
            # a tie reaching the last hit returned may go on among the rows not returned
            cut = [len(h) > n > 0 and h[n - 1][0] == h[-1][0] for h in hits]
            if width >= total or not any(cut):
                return [h[:n] for h in hits]
            width = min(2 * width, total)

    def _ranked(self, queries: list[Row], k: int, q_emb: np.ndarray) -> list[Retrieved]:
        """The queries' hits given their embeddings: what every dense option overrides (DPP, MDL, vote-k), so
        ``retrieve`` and the batched ``retrieve_grouped`` rank alike."""
        return [Retrieved([i for _, i in hits], [s for s, _ in hits])
                for hits in self.ranked_hits(queries, q_emb, k, need=k)]
