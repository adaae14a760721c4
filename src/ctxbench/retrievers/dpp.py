"""DPPRetriever: relevance-diversity selection over the top candidates of the dense retriever (Ye et al. 2023,
arXiv 2302.05698, as OpenCompass's DPPRetriever does it; our own code).

For each query: the top ``candidate_num`` pool rows by embedding similarity, then a greedy MAP inference of a
determinantal point process (Chen et al. 2018, "Fast Greedy MAP Inference for DPP") over the kernel
``L_ij = r_i * s_ij * r_j`` with ``s_ij = (1 + cos(e_i, e_j)) / 2`` and relevance ``r_i = exp((rel_i - max rel) /
(2 * scale_factor))``, ``rel_i = (1 + cos(q, e_i)) / 2``; a smaller ``scale_factor`` weighs relevance more. The
embeddings are L2-normalised for the kernel whatever the embedder's setting. The selected rows are returned in
decreasing relevance (OpenCompass's order), scored by their cosine similarity to the query.

Deterministic by construction: there is nothing random (OpenCompass never uses its ``seed``, so we do not offer
one); an argmax tie goes to the better-ranked candidate. Unlike OpenCompass, a selected item can never be selected
again: when the kernel's rank is exhausted (duplicates), the remaining places go to the next candidates by relevance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ctxbench.core.part import param, refuse
from ctxbench.retrievers.base import Retrieved, Row
from ctxbench.retrievers.dense import DenseRetriever

_EPS = 1e-10


def greedy_map_dpp(kernel: np.ndarray, k: int) -> list[int]:
    """Indices of ``k`` items chosen greedily to maximise the determinant of the kernel's submatrix (incremental
    Cholesky); ties go to the lower index. Items with no gain left are taken in index order at the end."""
    n = kernel.shape[0]
    k = min(k, n)
    if k == 0:
        return []
    cis = np.zeros((k, n))
    di2s = np.array(np.diag(kernel), dtype=np.float64)
    selected: list[int] = []
    j = int(np.argmax(di2s))
    while True:
        selected.append(j)
        if len(selected) == k:
            break
        t = len(selected) - 1
        dj = np.sqrt(max(di2s[j], _EPS))
        eis = (kernel[j] - cis[:t, j] @ cis[:t]) / dj
        cis[t] = eis
        di2s = di2s - eis ** 2
        di2s[selected] = -np.inf
        j = int(np.argmax(di2s))
        if di2s[j] < _EPS:  # no determinant gain left: fill by candidate order
            rest = [i for i in range(n) if i not in set(selected)]
            selected += rest[:k - len(selected)]
            break
    return selected


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


@dataclass(kw_only=True)
class DPPRetriever(DenseRetriever):
    """``ice_num`` rows chosen among the top ``candidate_num`` (module doc); ``scale_factor`` > 0."""

    name: ClassVar[str] = "dpp"

    candidate_num: int = param(24, ge=1)
    scale_factor: float = param(0.1, gt=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.candidate_num < self.ice_num:
            raise refuse("candidate_num", self.candidate_num, f"must be >= ice_num ({self.ice_num})")

    def kernel(self, q: np.ndarray, cands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(L, cos)``: the DPP kernel over the candidates and their cosine similarity to the query."""
        reps = _unit(self.embeddings[cands].astype(np.float64))
        cos = reps @ _unit(q.astype(np.float64))
        rel = (cos + 1) / 2
        rel = np.exp((rel - rel.max()) / (2 * self.scale_factor))
        sim = (reps @ reps.T + 1) / 2
        return rel[:, None] * sim * rel[None, :], cos

    def _ranked(self, queries: list[Row], k: int, q_emb: np.ndarray) -> list[Retrieved]:
        out = []
        for r, hits in enumerate(self.ranked_hits(queries, q_emb, max(self.candidate_num, k), need=k)):
            cands = np.array([i for _, i in hits], np.int64)
            L, cos = self.kernel(q_emb[r], cands)
            chosen = greedy_map_dpp(L, k)
            chosen.sort(key=lambda c: (-cos[c], c))  # decreasing relevance
            out.append(Retrieved([int(cands[c]) for c in chosen], [float(cos[c]) for c in chosen]))
        return out
