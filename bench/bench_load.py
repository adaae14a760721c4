"""Loading a RULER task as a run does (``RulerTask.load``): every row of the file against the run's ``max_examples``
first rows (``Dataset.load_raw``'s ``limit``: only those are converted; sentence segmentation and token spans are
most of a row's load time, while the checks of every line stay). Prints seconds per load (best of --repeats) and
the ratio to loading every row, per task.

    python bench/bench_load.py [--num-samples 500] [--length 1024] [--tasks niah_mq_q2,vt_h2_c3] [--limits 4,20]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench_faithfulness import best_of  # the bench folder is on sys.path when a script in it runs

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-samples", type=int, default=500)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--tasks", default="niah_mq_q2,niah_mv_v2,vt_h2_c3")
    ap.add_argument("--limits", default="4,20", help="max_examples values to load beside every row")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache-dir", type=Path, default=ROOT / ".cache")
    args = ap.parse_args(argv)

    from ctxbench.datasets import Paths, RulerTask
    from ctxbench.models import ModelConfig
    from ctxbench.models.causal_lm import load_tokenizer

    tok = load_tokenizer(ModelConfig(), cache_dir=args.cache_dir)
    limits = [int(x) for x in args.limits.split(",") if x.strip()]
    print(f"{'task':<14}{'rows':>6}{'all rows s':>12}" + "".join(f"{f'first {n} s':>12}{'ratio':>8}" for n in limits))
    with tempfile.TemporaryDirectory() as tmp:
        paths = Paths(data_dir=tmp)
        for name in [t.strip() for t in args.tasks.split(",") if t.strip()]:
            task = RulerTask(name=name, length=args.length, num_samples=args.num_samples)
            task.raw_path(paths, tok)  # generated once, outside the timings
            full = best_of(lambda: task.load(paths, tok), args.repeats)
            line = f"{name:<14}{args.num_samples:>6}{full:>12.2f}"
            for n in limits:
                part = best_of(lambda: task.load(paths, tok, n), args.repeats)
                line += f"{part:>12.3f}{part / full:>8.3f}"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
