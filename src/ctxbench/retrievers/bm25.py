"""BM25Retriever: BM25 over the pool's text with ``bm25s`` (MIT, a maintained BM25 library).

Scoring: ``bm25s`` with ``method`` (default ``lucene``: idf = ln(1 + (N - df + 0.5) / (df + 0.5)), term weight
tf / (tf + k1 (1 - b + b |d| / avgdl))), ``k1`` 1.5, ``b`` 0.75; a query's score for a document is the sum over
its tokens, repeated tokens counted each time. OpenCompass's BM25Retriever uses ``rank_bm25.BM25Okapi`` over NLTK
``word_tokenize`` tokens; we keep the behaviour (top ``ice_num`` by BM25), not those libraries.

Tokenisation (the same for pool and queries): ``bm25s.tokenize`` — lower-cased, tokens are runs of two or more word
characters (regex ``(?u)\\b\\w\\w+\\b``), stop words removed (``stopwords``: ``en``, bm25s's English list, or null),
no stemming. Query tokens absent from the pool's vocabulary are dropped. Ties are broken by the lower pool index, so
results are exact and deterministic (``top_k``); all queries are scored in blocks of vectorised sums.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from ctxbench.part import param
from ctxbench.retrievers.base import Retrieved, Row, TextRetriever, exclusions, top_k

METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
_BLOCK = 256  # queries scored per dense block


def bm25s_module():
    """``bm25s``, imported on first use, with its logger put back to WARNING: bm25s sets its own logger to DEBUG when
    imported, which prints a line on the console for every index built."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


def bm25_tokenize(texts: list[str], stopwords: Optional[str]) -> list[list[str]]:
    return bm25s_module().tokenize(list(texts), lower=True, stopwords=stopwords, stemmer=None, return_ids=False,
                          show_progress=False)


@dataclass(kw_only=True)
class BM25Retriever(TextRetriever):
    """Top ``ice_num`` pool rows by BM25 (module doc for the formula and tokenisation). ``exclude_self``: never return
    the pool row with the query's id (the next best row fills its place)."""

    name: ClassVar[str] = "bm25"

    ice_num: int = param(1, ge=0)
    k1: float = param(1.5, gt=0)
    b: float = param(0.75, ge=0, le=1)
    method: str = param("lucene", choices=METHODS)
    stopwords: Optional[str] = param("en", choices=(None, "en"))
    exclude_self: bool = False

    def _fit(self, rows: list[Row]) -> None:
        self._bm25 = bm25s_module().BM25(k1=self.k1, b=self.b, method=self.method, backend="numpy", csc_backend="numpy")
        # create_empty_token keeps documents without any token valid (they score 0)
        self._bm25.index(bm25_tokenize(self.pool_texts(), self.stopwords), show_progress=False)
        self._vocab = self._bm25.vocab_dict

    def scores(self, queries: list[Row]) -> np.ndarray:
        """The BM25 score of every pool row for every query, ``(len(queries), len(pool))`` float32."""
        tokens = bm25_tokenize(self.query_texts(queries), self.stopwords)
        return np.concatenate([self._block_scores(tokens[s:s + _BLOCK]) for s in range(0, len(tokens), _BLOCK)]) \
            if tokens else np.zeros((0, len(self.pool)), dtype=np.float32)

    def _block_scores(self, tokens: list[list[str]]) -> np.ndarray:
        sc = self._bm25.scores
        data, indices, indptr = sc["data"], sc["indices"], sc["indptr"]
        out = np.zeros((len(tokens), len(self.pool)), dtype=np.float32)
        rows, cols, vals = [], [], []
        ids_per_query = []
        for r, toks in enumerate(tokens):
            ids = [self._vocab[t] for t in toks if t in self._vocab]
            ids_per_query.append(ids)
            for tid in ids:
                a, z = indptr[tid], indptr[tid + 1]
                cols.append(indices[a:z])
                vals.append(data[a:z])
                rows.append(np.full(z - a, r, dtype=np.int64))
        if rows:
            np.add.at(out, (np.concatenate(rows), np.concatenate(cols).astype(np.int64)), np.concatenate(vals))
        nonocc = getattr(self._bm25, "nonoccurrence_array", None)
        if nonocc is not None:  # bm25l / bm25+: a constant per query token for documents without it
            for r, ids in enumerate(ids_per_query):
                out[r] += nonocc[ids].sum() if ids else 0.0
        return out

    def _retrieve(self, queries: list[Row], k: int) -> list[Retrieved]:
        tokens = bm25_tokenize(self.query_texts(queries), self.stopwords)
        own = exclusions(self, queries, self.exclude_self)
        out = []
        for start in range(0, len(queries), _BLOCK):
            block = self._block_scores(tokens[start:start + _BLOCK])
            for r in range(block.shape[0]):
                i = start + r
                if own[i] is not None and k > len(self.pool) - 1:
                    raise ValueError(f"k={k}: only {len(self.pool) - 1} pool rows besides query {queries[i]['id']!r}")
                idx, sc = top_k(block[r], k, exclude=None if own[i] is None else [own[i]])
                out.append(Retrieved(idx.tolist(), sc.tolist()))
        return out
