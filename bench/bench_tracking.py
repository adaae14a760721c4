"""What experiment tracking costs and what an optimising sweep finds (docs/tracking.md, docs/benchmarks.md).

1. MLflow's overhead per job: the time the job itself spent in the tracker (its check, which imports mlflow, the
   run's creation, logging params, metrics and artifacts; the job's "trackers took" line) as a ratio to the rest of
   the job, and, as a second view that includes process-level effects but also the machine's noise, the wall time of
   the same job with ``logger=none`` and ``logger=mlflow`` (a SQLite store made by a first, untimed job): the README's
   default run_exp job (SmolLM2, 3 RULER examples, faithfulness + recovery) and a retrieval job (BM25 on the
   Wikipedia demo set).
2. The Optuna study of ``conf/experiment/optuna_bm25.yaml`` (TPE over BM25's k1 and b): its best nDCG@10 on the demo
   set against the default settings (k1 1.5, b 0.75).

    PYTHONPATH=src .venv/bin/python bench/bench_tracking.py [--trials 20] [--repeats 2] [--skip-default-job]
        [--skip-study]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUN_EXP = ROOT / "exp" / "exp2" / "run_exp.py"
RETRIEVAL = ["mode=retrieval", "dataset=wiki_demo", "retriever=bm25", "progress=false"]


def run(args: list[str], cwd: Path, tracked: list | None = None) -> float:
    """The job's wall time; ``tracked`` gets the seconds the job spent in MLflow (its "trackers took" line)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(RUN_EXP), *args], cwd=cwd, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"run_exp {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    if tracked is not None:
        found = re.search(r"trackers took mlflow ([0-9.]+) s", proc.stdout + proc.stderr)
        tracked.append(float(found.group(1)) if found else float("nan"))
    return took


def overhead(name: str, job: list[str], tmp: Path, repeats: int) -> None:
    common = [f"paths.data_dir={tmp / 'data'}", f"paths.model_cache_dir={ROOT / '.cache'}",
              f"paths.samples_dir={tmp / 'samples'}"]
    mlflow = ["logger=mlflow", f"logger.mlflow.tracking_uri=sqlite:///{tmp / 'mlflow.db'}",
              f"logger.mlflow.artifact_location={tmp / 'artifacts'}"]
    t0 = time.perf_counter()
    run([*job, *common, *mlflow], tmp)  # warm-up: data generated, the store's tables made, caches filled
    first = time.perf_counter() - t0
    base, tracked, inside = [], [], []
    for _ in range(repeats):  # interleaved: the machine's load changes over minutes
        base.append(run([*job, *common, "logger=none"], tmp))
        tracked.append(run([*job, *common, *mlflow], tmp, inside))
    b, t, s = statistics.median(base), statistics.median(tracked), statistics.median(inside)
    print(f"{name}: the job spent {s:.2f} s in MLflow = {s / (t - s):.1%} of the rest of the job ({t - s:.1f} s); "
          f"wall time logger=none {b:.1f} s, logger=mlflow {t:.1f} s ({(t - b) / b:+.1%}; median of {repeats}); "
          f"first job with a new store: {first:.1f} s")


def study(tmp: Path, trials: int) -> None:
    common = [f"paths.data_dir={tmp / 'data'}", f"paths.model_cache_dir={ROOT / '.cache'}"]
    default_dir = tmp / "default"
    run([*RETRIEVAL, *common, f"hydra.run.dir={default_dir}"], tmp)
    default = json.loads((default_dir / "retrieval.json").read_text())["results"][0]["metrics"]["ndcg_at_10"]
    sweep = tmp / "study"
    t0 = time.perf_counter()
    run(["-m", "+experiment=optuna_bm25", *common, f"hydra.sweeper.n_trials={trials}", f"hydra.sweep.dir={sweep}"],
        tmp)
    took = time.perf_counter() - t0
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    params = ", ".join(f"{k.split('.')[-1]} {v:.3f}" for k, v in best["best_params"].items())
    print(f"Optuna TPE, {trials} trials on wiki_demo (10,033 documents, 500 queries) in {took:.0f} s: best nDCG@10 "
          f"{best['best_value']:.4f} ({params}) against {default:.4f} with the defaults (k1 1.5, b 0.75): "
          f"{best['best_value'] - default:+.4f} ({best['best_value'] / default - 1:+.2%})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-default-job", action="store_true", help="only the retrieval job's overhead")
    ap.add_argument("--skip-study", action="store_true", help="only the overhead")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        overhead("retrieval job (BM25, wiki_demo)", RETRIEVAL, tmp, args.repeats)
        if not args.skip_default_job:
            overhead("default run_exp job (SmolLM2, 3 examples)", ["progress=false"], tmp, args.repeats)
        if not args.skip_study:
            study(tmp, args.trials)


if __name__ == "__main__":
    main()
