"""BM25Retriever: BM25 over the pool's text, by default with ``bm25s`` (MIT, a maintained BM25 library), and as
OpenCompass scores it as an option (``conf/retriever/bm25_opencompass.yaml``; docs/retrievers.md, "bm25").

Scoring (``method``): a ``bm25s`` variant (default ``lucene``: idf = ln(1 + (N - df + 0.5) / (df + 0.5)), term weight
tf / (tf + k1 (1 - b + b |d| / avgdl))), or ``okapi_rank_bm25``: ``rank_bm25.BM25Okapi`` itself, what OpenCompass's
``BM25Retriever`` calls (idf = ln((N - df + 0.5) / (df + 0.5)), a negative idf replaced by ``epsilon`` times the mean
idf). ``k1`` 1.5, ``b`` 0.75; a query's score for a document is the sum over its tokens, repeats counted each time.

Tokenisation (the same for pool and queries), ``tokenizer``:
- ``bm25s`` (default): ``bm25s.tokenize``, lower-cased, tokens are runs of two or more word characters (regex
  ``(?u)\\b\\w\\w+\\b``), stop words removed (``stopwords``: ``en``, bm25s's English list, or null), no stemming;
- ``nltk_treebank``: NLTK's ``NLTKWordTokenizer`` (the Treebank rules ``word_tokenize`` applies to each sentence) over
  the whole text: cased, punctuation as tokens, no stop words; needs no downloaded model. It differs from
  ``word_tokenize`` where a text has several sentences: only the text's last period is split off;
- ``nltk_word``: ``nltk.word_tokenize`` exactly, as OpenCompass tokenises (Punkt sentences, then the Treebank rules);
  needs NLTK's ``punkt_tab`` model (``python -m nltk.downloader punkt_tab``).
Query tokens absent from the pool's vocabulary score 0.

Ties (``ties``): ``pool_order`` (default), equal scores by the lower pool index, exact and deterministic (``top_k``);
``opencompass``: the order of ``np.argsort(scores)[::-1]``, the call OpenCompass takes its top ``ice_num`` with (equal
scores highest index first only where numpy's sort keeps them in index order, which its vectorised float64 sort does
not promise; the same call orders them as OpenCompass would with the same numpy). All queries are scored in blocks of
vectorised sums (``okapi_rank_bm25``: rank_bm25's per-query ``get_scores``, a loop over the documents per query token).
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from ctxbench.core.errors import ConfigError
from ctxbench.core.part import param, refuse
from ctxbench.retrievers.base import Retrieved, Row, TextRetriever, exclusions, top_k

BM25S_METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
METHODS = (*BM25S_METHODS, "okapi_rank_bm25")
TOKENIZERS = ("bm25s", "nltk_treebank", "nltk_word")
TIES = ("pool_order", "opencompass")
_BLOCK = 256  # queries scored per dense block
COMPAT_EXTRA = "pip install 'ctxbench[compat]' (rank-bm25, nltk)"


def bm25s_module():
    """``bm25s``, imported on first use, with its logger put back to WARNING: bm25s sets its own logger to DEBUG when
    imported, which prints a line on the console for every index built."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


def bm25_tokenize(texts: list[str], stopwords: Optional[str]) -> list[list[str]]:
    return bm25s_module().tokenize(list(texts), lower=True, stopwords=stopwords, stemmer=None, return_ids=False,
                                   show_progress=False)


def _compat(module: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"retriever bm25: {module} is not installed; {COMPAT_EXTRA}") from None


def nltk_tokenize(texts: list[str], tokenizer: str) -> list[list[str]]:
    """``nltk_treebank``: the Treebank rules over each whole text; ``nltk_word``: ``nltk.word_tokenize``."""
    nltk_tokenize_module = _compat("nltk.tokenize")
    if tokenizer == "nltk_treebank":
        rules = nltk_tokenize_module.NLTKWordTokenizer()
        return [rules.tokenize(t) for t in texts]
    try:
        return [nltk_tokenize_module.word_tokenize(t) for t in texts]
    except LookupError:
        raise ConfigError("retriever bm25: tokenizer=nltk_word needs NLTK's punkt_tab model (python -m "
                          "nltk.downloader punkt_tab); tokenizer=nltk_treebank needs none") from None


def argsort_top_k(scores: np.ndarray, k: int, exclude: Optional[int]) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` of ``np.argsort(scores)[::-1]`` (OpenCompass's order), ``exclude`` left out."""
    order = np.argsort(scores)[::-1]
    if exclude is not None:
        order = order[order != exclude]
    order = order[:k].astype(np.int64)
    return order, np.asarray(scores, dtype=np.float64)[order]


@dataclass(kw_only=True)
class BM25Retriever(TextRetriever):
    """Top ``ice_num`` pool rows by BM25 (module doc for the formulas, tokenisers and tie rules). ``exclude_self``:
    never return the pool row with the query's id (the next best row fills its place). ``epsilon``: the idf floor of
    ``okapi_rank_bm25`` (a share of the mean idf)."""

    name: ClassVar[str] = "bm25"

    ice_num: int = param(1, ge=0)
    k1: float = param(1.5, gt=0)
    b: float = param(0.75, ge=0, le=1)
    method: str = param("lucene", choices=METHODS)
    stopwords: Optional[str] = param("en", choices=(None, "en"))
    tokenizer: str = param("bm25s", choices=TOKENIZERS)
    epsilon: float = param(0.25, ge=0)
    ties: str = param("pool_order", choices=TIES)
    exclude_self: bool = False

    def __post_init__(self):
        super().__post_init__()
        if self.tokenizer != "bm25s" and self.stopwords is not None:
            raise refuse("stopwords", self.stopwords, f"only the bm25s tokenizer removes stop words; set "
                         f"stopwords=null with tokenizer={self.tokenizer}")

    def _tokenize(self, texts: list[str]) -> list[list[str]]:
        if self.tokenizer == "bm25s":
            return bm25_tokenize(texts, self.stopwords)
        return nltk_tokenize(texts, self.tokenizer)

    def _fit(self, rows: list[Row]) -> None:
        tokens = self._tokenize(self.pool_texts())
        if self.method == "okapi_rank_bm25":
            self._okapi = _compat("rank_bm25").BM25Okapi(tokens, k1=self.k1, b=self.b, epsilon=self.epsilon)
            return
        self._bm25 = bm25s_module().BM25(k1=self.k1, b=self.b, method=self.method, backend="numpy",
                                         csc_backend="numpy")
        # create_empty_token keeps documents without any token valid (they score 0)
        self._bm25.index(tokens, show_progress=False)
        self._vocab = self._bm25.vocab_dict

    def scores(self, queries: list[Row]) -> np.ndarray:
        """The BM25 score of every pool row for every query, ``(len(queries), len(pool))`` (float32 for bm25s,
        float64 for rank_bm25)."""
        tokens = self._tokenize(self.query_texts(queries))
        if not tokens:
            return np.zeros((0, len(self.pool)), dtype=np.float32)
        return np.concatenate([self._block_scores(tokens[s:s + _BLOCK]) for s in range(0, len(tokens), _BLOCK)])

    def _block_scores(self, tokens: list[list[str]]) -> np.ndarray:
        if self.method == "okapi_rank_bm25":
            return np.stack([self._okapi.get_scores(t) for t in tokens]) if tokens else \
                np.zeros((0, len(self.pool)))
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
        tokens = self._tokenize(self.query_texts(queries))
        own = exclusions(self, queries, self.exclude_self)
        out = []
        for start in range(0, len(queries), _BLOCK):
            block = self._block_scores(tokens[start:start + _BLOCK])
            for r in range(block.shape[0]):
                i = start + r
                if own[i] is not None and k > len(self.pool) - 1:
                    raise ValueError(f"k={k}: only {len(self.pool) - 1} pool rows besides query {queries[i]['id']!r}")
                if self.ties == "opencompass":
                    idx, sc = argsort_top_k(block[r], k, own[i])
                else:
                    idx, sc = top_k(block[r], k, exclude=None if own[i] is None else [own[i]])
                out.append(Retrieved(idx.tolist(), sc.tolist()))
        return out
