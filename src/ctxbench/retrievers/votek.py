"""VotekRetriever: one diverse, representative set of pool rows shared by every query (vote-k, Su et al. 2022,
arXiv 2209.01975, as OpenCompass's VotekRetriever does it; our own code).

Each pool row votes for its ``votek_k`` nearest other rows (cosine similarity of the embedder's vectors, ties to the
lower index). Rows are ranked by their number of votes (ties: lower index) and taken greedily, skipping a row whose
set of voters overlaps the voters of an already selected row by at least ``overlap_threshold`` times its own size
(OpenCompass compares with every better-ranked row, selected or not; we compare with the selected ones, which is
what the diversity rule is for). Places left over (rows without votes, or skipped) are filled by a draw from the
remaining rows with a generator seeded by ``seed`` (OpenCompass's fill is unseeded). The set does not depend on the
queries; each query gets a copy of its first ``k`` rows (with ``exclude_self``, a query in the pool gets the set
without its own row, the next selected row taking its place).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ctxbench.core.part import param
from ctxbench.retrievers.base import Retrieved, Row, exclusions, rank_scores
from ctxbench.retrievers.dense import DenseRetriever


def vote_neighbours(emb: np.ndarray, votek_k: int) -> list[list[int]]:
    """For each row, its ``votek_k`` nearest other rows by cosine similarity (exact Faiss search on unit vectors;
    equal similarities: lower index first)."""
    import faiss

    n = emb.shape[0]
    kk = min(votek_k, n - 1)
    if kk <= 0:
        return [[] for _ in range(n)]
    unit = np.ascontiguousarray(emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12), np.float32)
    index = faiss.IndexFlatIP(unit.shape[1])
    index.add(unit)
    scores, idx = index.search(unit, min(kk + 1, n))
    out = []
    for i in range(n):
        hits = sorted(((float(s), int(j)) for s, j in zip(scores[i], idx[i]) if j >= 0 and j != i),
                      key=lambda h: (-h[0], h[1]))
        out.append([j for _, j in hits[:kk]])
    return out


def votek_select(emb: np.ndarray, select_num: int, votek_k: int, overlap_threshold: float, seed: int) -> list[int]:
    """The vote-k selection over embeddings ``emb`` (module doc). The result for ``select_num = m`` starts with the
    result for any smaller ``select_num``."""
    n = emb.shape[0]
    select_num = min(select_num, n)
    voters: list[set[int]] = [set() for _ in range(n)]
    for i, near in enumerate(vote_neighbours(emb, votek_k)):
        for j in near:
            voters[j].add(i)
    ranked = sorted((j for j in range(n) if voters[j]), key=lambda j: (-len(voters[j]), j))
    selected: list[int] = []
    for j in ranked:
        if len(selected) == select_num:
            break
        if any(len(voters[j] & voters[s]) >= overlap_threshold * len(voters[j]) for s in selected):
            continue
        selected.append(j)
    if len(selected) < select_num:
        taken = set(selected)
        rest = np.array([j for j in range(n) if j not in taken], dtype=np.int64)
        fill = np.random.default_rng(seed).permutation(rest)  # a permutation: a longer fill extends a shorter one
        selected += [int(j) for j in fill[:select_num - len(selected)]]
    return selected


@dataclass(kw_only=True)
class VotekRetriever(DenseRetriever):
    """``ice_num`` rows chosen once by vote-k (module doc); ``votek_k`` neighbours per vote, ``overlap_threshold``
    in (0, 1], ``seed`` for the fill."""

    name: ClassVar[str] = "votek"

    votek_k: int = param(5, ge=1)
    overlap_threshold: float = param(1.0, gt=0, le=1)
    seed: int = 43

    def _index_embeddings(self, emb: np.ndarray) -> None:
        super()._index_embeddings(emb)
        self._selection: list[int] = []  # a new pool: select again

    def selection(self, k: int) -> list[int]:
        """The first ``k`` rows of the vote-k selection (computed once for the largest ``k`` asked)."""
        if len(self._selection) < min(k, len(self.pool)):
            self._selection = votek_select(self.embeddings, k, self.votek_k, self.overlap_threshold, self.seed)
        return self._selection[:k]

    def _retrieve(self, queries: list[Row], k: int) -> list[Retrieved]:
        return self._ranked(queries, k, None)  # the selection does not depend on the query: nothing to encode

    def _ranked(self, queries: list[Row], k: int, q_emb) -> list[Retrieved]:
        own = exclusions(self, queries, self.exclude_self)
        out = []
        for r, q in enumerate(queries):
            if own[r] is None:
                chosen = self.selection(k)
            else:  # the shared set without the query's own row, the next selected row in its place
                if k > len(self.pool) - 1:
                    raise ValueError(f"k={k}: only {len(self.pool) - 1} pool rows besides query {q['id']!r}")
                chosen = [i for i in self.selection(k + 1) if i != own[r]][:k]
            out.append(Retrieved(list(chosen), rank_scores(len(chosen))))
        return out
