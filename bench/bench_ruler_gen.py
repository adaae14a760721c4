"""Speed of the RULER-format generator: samples/s per task and the ratio of the generation time to the time of
tokenising every written input once (upstream RULER, which re-tokenises the whole input inside a binary search, is far
above 3; the incremental fit aims at <= 3). Also prints the length distribution (length / max_seq_length; length =
tokens of input + answer prefix + tokens_to_generate, upstream's rule).

    python bench/bench_ruler_gen.py [--num-samples 500] [--length 1024] [--tasks all|name,name,...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def default_morehopqa() -> Path:
    try:  # the packaged 150-row sample
        from ctxbench.datasets.morehopqa import morehopqa_sample

        return morehopqa_sample()
    except ImportError:
        return ROOT.parent / "shared" / "data" / "morehopqa" / "morehopqa_final_150samples.json"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-samples", type=int, default=500)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--tasks", default="all", help="'all' (the RULER tasks of FlashTrace's Table 1), 'every' "
                                                   "(+ upstream variants) or a comma-separated list")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--morehopqa", type=Path, default=None, help="MoreHopQA-format file (default: the packaged sample)")
    ap.add_argument("--cache-dir", type=Path, default=ROOT / ".cache")
    args = ap.parse_args(argv)
    args.morehopqa = args.morehopqa or default_morehopqa()

    from ctxbench.datasets.ruler_gen import REFERENCE_TASKS, TASKS, TokenCounter, write_task
    from ctxbench.datasets.ruler_gen.text_sources import wiki_sentences
    from ctxbench.models import ModelConfig
    from ctxbench.models.causal_lm import load_tokenizer

    tasks = list(REFERENCE_TASKS) if args.tasks == "all" else list(TASKS) if args.tasks == "every" else \
        [t.strip() for t in args.tasks.split(",") if t.strip()]
    tok = load_tokenizer(ModelConfig(), cache_dir=args.cache_dir)
    t0 = time.perf_counter()
    wiki_sentences()  # one-off load of the offline essay text, reported apart
    print(f"essay text load: {time.perf_counter() - t0:.2f} s (once per process)")
    counter = TokenCounter(tok)  # shared across tasks, as a data-preparation run would do

    header = f"{'task':<16}{'samples/s':>10}{'gen s':>8}{'tok s':>8}{'ratio':>7}{'exact/sample':>13}" \
             f"{'len min':>8}{'mean':>7}{'median':>7}{'max':>6}{'>=95%':>7}"
    print(header)
    tot_gen = tot_tok = 0.0
    fractions: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in tasks:
            calls0 = counter.exact_calls
            t0 = time.perf_counter()
            path = write_task(tmp, task, max_seq_length=args.length, counter=counter, num_samples=args.num_samples,
                              seed=args.seed, morehopqa_path=args.morehopqa)
            gen = time.perf_counter() - t0
            calls = counter.exact_calls - calls0
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
            t0 = time.perf_counter()
            for r in rows:
                tok(r["input"], add_special_tokens=False)
            tok_s = time.perf_counter() - t0
            lengths = [r["length"] for r in rows]
            frac = [x / args.length for x in lengths]
            fractions += frac
            tot_gen += gen
            tot_tok += tok_s
            print(f"{task:<16}{len(rows) / gen:>10.1f}{gen:>8.2f}{tok_s:>8.2f}{gen / tok_s:>7.2f}"
                  f"{calls / len(rows):>13.2f}{min(lengths):>8}{statistics.mean(lengths):>7.0f}"
                  f"{statistics.median(lengths):>7.0f}{max(lengths):>6}"
                  f"{sum(f >= 0.95 for f in frac) / len(frac):>7.0%}")
    n = len(fractions)
    print(f"{'TOTAL':<16}{n / tot_gen:>10.1f}{tot_gen:>8.2f}{tot_tok:>8.2f}{tot_gen / tot_tok:>7.2f}")
    q = statistics.quantiles(fractions, n=20)
    print(f"length / max_seq_length over {n} samples: min {min(fractions):.3f}  p5 {q[0]:.3f}  median "
          f"{statistics.median(fractions):.3f}  mean {statistics.mean(fractions):.3f}  max {max(fractions):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
