"""Wall time of one run_exp sweep (3 RULER tasks x 2 methods at 1,024 tokens) run serially, with the joblib launcher
(2 jobs) and with a local Ray cluster (2 workers), as ratios to serial, and each launcher's overhead per job.

Overhead per job = (wall x parallel jobs - sum of the jobs' own durations) / jobs, where a job's duration runs from
Hydra writing its ``.hydra/config.yaml`` to run_exp writing its ``summary.json``: what is left is process start,
imports, the launcher's scheduling and its waiting for the slowest job. The data is generated before the timed sweeps.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_launchers.py [--examples 1] [--views seq]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["niah_single_1", "niah_mq_q2", "vt_h2_c3"]
METHODS = ["ifr_multi_hop", "random"]
LAUNCHERS = {
    "serial": ([], 1),
    "joblib (2 jobs)": (["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], 2),
    "ray (2 workers)": (["hydra/launcher=ray_local", "hydra.launcher.ray.init.num_cpus=2"], 2),
}


def run(args: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(proc.stderr[-3000:])
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=1, help="examples per task")
    ap.add_argument("--views", default="seq", help="token views scored (fewer views, fewer deletion passes)")
    ap.add_argument("--length", type=int, default=1024)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_launchers."))
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    paths = [f"paths.data_dir={tmp / 'data'}", f"paths.model_cache_dir={ROOT / '.cache'}",
             f"paths.samples_dir={tmp / 'samples'}"]
    for task in TASKS:
        run(["exp/exp2/prepare_data.py", f"dataset={task}", f"length={a.length}",
             f"dataset.num_samples={a.examples}", *paths], env)
    common = ["exp/exp2/run_exp.py", "-m", f"dataset={','.join(TASKS)}", f"attribution={','.join(METHODS)}",
              f"length={a.length}", f"max_examples={a.examples}", f"dataset.num_samples={a.examples}",
              f"views=[{a.views}]", "html=false", "heatmaps=0", "progress=false", *paths]
    n_jobs = len(TASKS) * len(METHODS)
    print(f"run_exp sweep: {len(TASKS)} tasks x {len(METHODS)} methods = {n_jobs} jobs, {a.examples} example(s) "
          f"each at {a.length} tokens, views {a.views}; OMP_NUM_THREADS={env['OMP_NUM_THREADS']}, "
          f"{os.cpu_count()} CPUs (shared machine: figures are noisy)")
    walls = {}
    for name, (launcher, parallel) in LAUNCHERS.items():
        out = tmp / name.split()[0]
        wall = run([*common, *launcher, f"hydra.sweep.dir={out}"], env)
        jobs = [d for d in out.iterdir() if (d / "summary.json").exists()]
        assert len(jobs) == n_jobs, f"{name}: {len(jobs)} of {n_jobs} jobs finished"
        busy = sum((d / "summary.json").stat().st_mtime - (d / ".hydra" / "config.yaml").stat().st_mtime for d in jobs)
        walls[name] = wall
        print(f"  {name:16s} wall {wall:7.1f} s  ratio to serial {walls['serial'] / wall:5.2f}x  "
              f"jobs' own time {busy:7.1f} s  overhead per job {(wall * parallel - busy) / n_jobs:5.1f} s")
    print(f"(outputs in {tmp})")


if __name__ == "__main__":
    main()
