"""Where the time of ``run_exp mode=retrieval`` goes, on the Wikipedia demo set (10,033 articles by default).

    .venv/bin/python bench/bench_retrieval.py [--n-docs 10033] [--n-queries 500] [--retriever dense]
                                              [--rerank-queries 20] [--rerank-top-k 10] [--data-dir /tmp/...]

The whole stage runs as ``run_exp`` runs it (``run_stage`` on the composed config, the embedding cache off so the
corpus is really encoded, search results written into a fresh job dir), with the Embedder's encode calls recorded.
Printed: the stage's wall time split into model/data loading, encoding (and, inside it, the encoder's forward passes),
Faiss search, writing the results, metrics and the rest; the share of the stage outside the encoder's forward pass
(goal < 10%, and the same share without the fixed loading cost). Reranking is timed apart (the query-likelihood
reranker on SmolLM2 over ``--rerank-top-k`` hits of ``--rerank-queries`` queries: pairs/s and the time a full
``rerank_top_k`` pass over every query would take at that rate), since on a CPU it dwarfs everything else.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compose_run(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from ctxbench.stages.conf import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="run", overrides=overrides)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-docs", type=int, default=10033)
    ap.add_argument("--n-queries", type=int, default=500)
    ap.add_argument("--retriever", default="dense")
    ap.add_argument("--rerank-queries", type=int, default=20, help="0: no reranking figures")
    ap.add_argument("--rerank-top-k", type=int, default=10)
    ap.add_argument("--data-dir", default=str(ROOT / "data"))
    args = ap.parse_args()

    from ctxbench.models.embedder import Embedder
    from ctxbench.stages.run import run_stage

    calls = []
    encode = Embedder.encode

    def recorded(self, texts, max_length):
        out = encode(self, texts, max_length)
        calls.append(dict(self.last_stats))
        return out

    loads = []
    load = Embedder.load

    def timed_load(self):
        t = time.perf_counter()
        out = load(self)
        loads.append(time.perf_counter() - t)
        return out

    Embedder.encode = recorded  # record every encoding call of the stage (corpus and queries)
    Embedder.load = timed_load
    job = Path(tempfile.mkdtemp(prefix="bench_retrieval_"))
    data = [f"paths.root={ROOT}", f"paths.data_dir={args.data_dir}", "mode=retrieval", "dataset=wiki_demo",
            f"dataset.n_docs={args.n_docs}", f"dataset.n_queries={args.n_queries}"]
    cfg = compose_run([*data, "dry_run=true", f"retriever={args.retriever}"])
    run_stage(cfg, job / "dry")  # writes the demo set once (not timed)
    overrides = [*data, f"retriever={args.retriever}", "progress=false"]
    if args.retriever == "dense":
        overrides.append("retriever.embedder.cache_dir=null")
    cfg = compose_run(overrides)
    t0 = time.perf_counter()
    summary = run_stage(cfg, job / "run")
    total = time.perf_counter() - t0
    (timing,) = summary["timings"].values()
    enc = sum(c.get("total_s", 0.0) for c in calls)
    fwd = sum(c.get("forward_s", 0.0) for c in calls)
    model_load = sum(loads)  # the embedder loads inside the first encode call, outside its own timing
    # the stage's search time holds the model load, the encoding, Faiss and writing the results JSON
    search_only = timing["search_s"] - enc - model_load
    rest = total - timing["search_s"] - timing["metrics_s"] + model_load
    metrics = summary["results"][0]["metrics"]
    print(f"wiki_demo: {args.n_docs} documents, {args.n_queries} queries, retriever={args.retriever}")
    print(f"  ndcg@10 {metrics['ndcg_at_10']:.4f}  recall@10 {metrics['recall_at_10']:.4f}  "
          f"mrr@10 {metrics['mrr_at_10']:.4f}")
    print(f"  stage total           {total:8.2f} s")
    print(f"    loading, data, misc {rest:8.2f} s  ({rest / total:6.1%}); embedder load {model_load:.2f} s")
    print(f"    encoding            {enc:8.2f} s  ({enc / total:6.1%}); forward passes {fwd:.2f} s, "
          f"{sum(c.get('n_texts', 0) for c in calls)} texts, {sum(c.get('tokens', 0) for c in calls)} tokens")
    print(f"    search + write JSON {search_only:8.2f} s  ({search_only / total:6.1%})")
    print(f"    metrics             {timing['metrics_s']:8.2f} s  ({timing['metrics_s'] / total:6.1%})")
    if fwd:
        print(f"  outside the encoder's forward pass: {(total - fwd) / total:.1%} of the stage "
              f"(goal < 10%); without loading: {(total - rest - fwd) / (total - rest):.1%}")
        print(f"  documents/s over the whole stage: {args.n_docs / total:.1f}")
    if args.rerank_queries:
        rerank_figures(job / "run", args)


def rerank_figures(job: Path, args) -> None:
    from ctxbench.datasets.base import Paths
    from ctxbench.retrieval.beir import WikiDemo
    from ctxbench.models import ModelConfig, load_causal_lm
    from ctxbench.rerankers.query_likelihood import QueryLikelihoodReranker
    from ctxbench.retrieval.search import rerank

    (split,) = WikiDemo(n_docs=args.n_docs, n_queries=args.n_queries).load_splits(
        Paths(root=str(ROOT), data_dir=args.data_dir))
    (path,) = (job / "search_results").rglob("*.json")
    run = json.loads(path.read_text())["search_results"]
    subset = {q: run[q] for q in sorted(run)[:args.rerank_queries]}
    reranker = QueryLikelihoodReranker()
    reranker.use_lm(load_causal_lm(ModelConfig(), cache_dir=ROOT / ".cache"))
    t0 = time.perf_counter()
    rerank(reranker, split, subset, args.rerank_top_k)
    dt = time.perf_counter() - t0
    pairs = len(subset) * args.rerank_top_k
    full = len(run) * 100 / (pairs / dt)
    print(f"  rerank (query_likelihood, SmolLM2): {pairs} pairs in {dt:.2f} s = {pairs / dt:.1f} pairs/s; "
          f"rerank_top_k=100 over all {len(run)} queries would take about {full:.0f} s")


if __name__ == "__main__":
    main()
