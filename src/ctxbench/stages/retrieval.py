"""run_exp with ``mode=retrieval``: the ``retriever`` (and the optional ``reranker``) on retrieval data, scored with
IR metrics (docs/retrieval.md).

Data: a retrieval dataset kind (``RetrievalData``: a FlagEmbedding / BEIR folder, the Wikipedia demo set) gives its
splits; any other dataset is read as the attribution stage reads it and its examples' contexts become per-example
corpora (``retrieval.context``). The causal LM of the ``model`` group is loaded only when the reranker or the
retriever uses it. Files in the job dir: ``manifest.json``, ``search_results/`` (unless ``output_dir`` puts them
elsewhere), ``retrieval.json`` (fractions, timings, settings) and ``retrieval.md`` (x100). A job with
``shard.count > 1`` only encodes its shard of the corpus into the embedding cache (``manifest.json`` in its dir);
the search job joins the shards (docs/scale-out.md).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional

from omegaconf import DictConfig, OmegaConf

from ctxbench.stages.conf import to_plain
from ctxbench.datasets.base import Dataset, Paths
from ctxbench.core.errors import ConfigError
from ctxbench.jobs.manifest import build_manifest, write_manifest
from ctxbench.core.part import build
from ctxbench.rerankers.base import Reranker
from ctxbench.retrieval.context import context_split
from ctxbench.retrieval.data import RetrievalData, RetrievalSplit
from ctxbench.retrieval.metrics import evaluate, parse_metric_key
from ctxbench.retrieval.mode import RetrievalMode
from ctxbench.retrieval.report import write_job_report
from ctxbench.retrieval.search import (NO_RERANKER, SearchResults, encode_shard, load_results, rerank,
                                       results_path, retriever_label, save_results, search)
from ctxbench.retrievers.base import EncodesCorpus, Retriever
from ctxbench.core.shards import Shard
from ctxbench.stages.common import stage_paths
from ctxbench.stages.jobdir import accept as accept_job

log = logging.getLogger(__name__)


def load_splits(dataset: Any, cfg: DictConfig, paths: Paths) -> list[RetrievalSplit]:
    if isinstance(dataset, RetrievalData):
        return dataset.load_splits(paths)
    from ctxbench.models.causal_lm import load_tokenizer

    # An attribution dataset is read with the model's tokenizer, as run_exp's attribution modes read it (RULER
    # tasks are generated to that tokenizer's lengths), so both modes see the same examples.
    tok = load_tokenizer(OmegaConf.to_object(cfg.model), cache_dir=paths.model_cache_dir)
    _, examples = dataset.load(paths, tok, cfg.max_examples, model=to_plain(cfg.model))
    return [context_split(examples, dataset.name)]


def notes(mode: RetrievalMode, reranked: bool) -> list[str]:
    """What a reader must know to compare the figures (cut-offs beyond what was kept)."""
    ks = sorted({parse_metric_key(m)[1] for m in mode.eval_metrics} | set(mode.k_values))
    out = []
    if any(k > mode.search_top_k for k in ks):
        out.append(f"search_top_k={mode.search_top_k}: metrics at larger k see only that many hits")
    if reranked and any(k > mode.rerank_top_k for k in ks):
        out.append(f"rerank_top_k={mode.rerank_top_k}: reranked metrics at larger k see only the reranked hits")
    return out


def stored_or_computed(reranker_name: Optional[str], settings: dict, compute: Callable[[], SearchResults], *,
                       root: Path, overwrite: bool, eval_name: str, model_name: str,
                       split: RetrievalSplit) -> SearchResults:
    """The search results stored for these settings, or computed and stored (a mismatch is refused by
    ``load_results`` unless ``overwrite``)."""
    path = results_path(root, model_name, reranker_name, split)
    results = load_results(path, settings, overwrite)
    if results is not None:
        log.info("%s: search results reused from %s", split.column, path)
        return results
    results = compute()
    save_results(path, results, settings, eval_name=eval_name, model_name=model_name, reranker_name=reranker_name,
                 split=split)
    return results


def retrieval_shard(cfg: DictConfig, retriever: Retriever) -> Shard:
    """The corpus-encoding shard this job writes (docs/scale-out.md); count 1: an ordinary search job."""
    if cfg.merge:
        raise ConfigError("merge: mode=retrieval has no merge step; the search job (without shard.*) joins the corpus "
                          "encoding shards it finds in the embedding cache")
    try:
        shard = Shard(cfg.shard.index, cfg.shard.count)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if shard.count > 1 and not isinstance(retriever, EncodesCorpus):
        raise ConfigError(f"shard.count={shard.count}: mode=retrieval shards the corpus encoding of an embedding "
                          f"retriever (retriever=dense); {retriever.name} encodes no corpus, run it unsharded")
    return shard


def retrieval_stage(cfg: DictConfig, output_dir: str | Path, mode: RetrievalMode) -> dict:
    output_dir = Path(output_dir)
    paths = stage_paths(cfg)
    if cfg.retriever is None:
        raise ConfigError("retriever: mode=retrieval evaluates a retriever; choose one (retriever=bm25, dense, random)")
    retriever = build(cfg.retriever, "retriever", Retriever)
    shard = retrieval_shard(cfg, retriever)
    reranker: Optional[Reranker] = build(cfg.reranker, "reranker", Reranker) \
        if cfg.reranker is not None else None
    dataset = build(cfg.dataset, "dataset")
    if not isinstance(dataset, (RetrievalData, Dataset)):
        raise ConfigError(f"dataset: {type(dataset).__name__} is neither retrieval data nor an attribution dataset")
    splits = load_splits(dataset, cfg, paths)
    r_settings = retriever.settings()  # as built, before a model is handed over
    accept_job()  # the first write into the job folder (ctxbench.stages.jobdir)
    write_manifest(output_dir, build_manifest(
        to_plain(cfg), stage="run_exp", root=paths.root, output_dir=output_dir,
        dataset={"name": dataset.name, "kind": "retrieval", "splits": [
            {"column": s.column, "source": s.source, "sha256": s.fingerprint(), "documents": len(s.corpus),
             "queries": len(s.queries)} for s in splits]}))
    if cfg.dry_run:
        log.info("dry run: parts built, %d splits read; nothing searched", len(splits))
        return {"dry_run": True, "splits": [s.column for s in splits]}
    if shard.count > 1:
        encoded = {split.column: encode_shard(retriever, split, shard) for split in splits}
        log.info("corpus encoding shard %d of %d written to the embedding cache (%s documents); the search job "
                 "(the same command without shard.*) joins the shards", shard.index, shard.count,
                 ", ".join(f"{c}: {n}" for c, n in encoded.items()))
        return {"shard": [shard.index, shard.count], "encoded": encoded}
    users = [p for p in (retriever, reranker) if p is not None and p.needs_lm]
    if users:
        from ctxbench.models import load_causal_lm

        loaded = load_causal_lm(OmegaConf.to_object(cfg.model), cache_dir=paths.model_cache_dir)
        for part in users:
            part.use_lm(loaded)
    root = Path(mode.output_dir) if mode.output_dir else output_dir / "search_results"
    entries, timings = [], {}
    for split in splits:
        found, timings[split.column] = _evaluate_split(split, retriever, r_settings, reranker, mode, root,
                                                       dataset.name)
        entries += found
    md = write_job_report(output_dir, entries, mode.eval_metrics,
                          {"k_values": mode.k_values, "timings": timings, "search_results": str(root)},
                          title=f"run_exp mode=retrieval: {retriever_label(retriever)} on {dataset.name}")
    print(md)
    return {"results": entries, "timings": timings}


def _evaluate_split(split, retriever: Retriever, r_settings: dict, reranker: Optional[Reranker], mode: RetrievalMode,
                    root: Path, eval_name: str) -> tuple[list[dict], dict[str, float]]:
    """One split: the retriever's search (and the reranker's), each read from the stored search results when they
    were made with the same settings, scored with pytrec_eval; the report's entries and the seconds of each step."""
    model_name = retriever_label(retriever)
    t: dict[str, float] = {}
    base = {"corpus": split.fingerprint(), "search_top_k": mode.search_top_k,
            "ignore_identical_ids": mode.ignore_identical_ids, "retriever": r_settings}
    store = dict(root=root, overwrite=mode.overwrite, eval_name=eval_name, model_name=model_name, split=split)
    t0 = time.perf_counter()
    run = stored_or_computed(None, base, lambda: search(retriever, split, mode.search_top_k,
                                                        mode.ignore_identical_ids), **store)
    t["search_s"] = time.perf_counter() - t0
    runs = {NO_RERANKER: run}
    if reranker is not None:
        settings = {**base, "rerank_top_k": mode.rerank_top_k, "reranker": reranker.settings()}
        t0 = time.perf_counter()
        runs[reranker.name] = stored_or_computed(reranker.name, settings,
                                                 lambda: rerank(reranker, split, run, mode.rerank_top_k), **store)
        t["rerank_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    entries = []
    for name, r in runs.items():
        ev = evaluate(r, split.qrels, mode.k_values, mode.missing_as_zero)
        entries.append({"model": model_name, "reranker": name, "dataset": split.dataset, "split": split.split,
                        "column": split.column, **ev.to_dict(), "notes": notes(mode, name != NO_RERANKER)})
    t["metrics_s"] = time.perf_counter() - t0
    return entries, t
