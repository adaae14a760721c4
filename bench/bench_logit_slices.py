"""Scoring passes over a large vocabulary: the logits of every scored position at once against a slice of positions
at a time (``ctxbench.models.logits.Scored``, above ``LOGITS_BYTES``), on faithfulness's deletion passes.

    OMP_NUM_THREADS=1 python bench/bench_logit_slices.py [--model gemma3-270m] [--length 2048] [--sequences 4]
        [--batch 4] [--repeats 1]

Input: bench_length's needle-in-a-haystack of ``--length`` tokens, a quarter generated (a long chain of thought);
``--sequences`` copies with different prompt blocks deleted, scored ``--batch`` per pass (``sequence_logprobs``).
Each mode runs in a child process of its own (model loaded as the run stage loads it, warmed on a short pass, VmHWM
reset): "whole" sets LOGITS_BYTES past the whole batch's logits (the path before slices; still the path wherever the
logits are small), "sliced" keeps the default. Printed: wall and CPU seconds, the resident memory added at the peak,
the ratios sliced / whole, the estimates the run stage checks, and the largest difference of the scores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

import numpy as np
import torch

from bench_length import GIB, load_model, make_input, measure

MODES = ("whole", "sliced")


def child(args) -> None:
    from ctxbench.attribution.memory import ModelShape, scoring_passes
    from ctxbench.metrics.faithfulness import sequence_logprobs
    from ctxbench.models import logits as logits_mod

    model, tok = load_model(args.model)
    mi, _, _ = make_input(tok, args.length)
    ids, P = mi.input_ids, int(mi.gen_start)
    seqs = ids.repeat(args.sequences, 1)
    for r in range(1, args.sequences):  # deletion passes: a growing block of the prompt replaced by the pad id
        seqs[r, : P * r // args.sequences] = tok.eos_token_id
    shape = ModelShape.of(model)
    G = ids.numel() - P
    if args.child == "whole":
        logits_mod.LOGITS_BYTES = 2 * args.batch * G * shape.vocab * 4
    with torch.no_grad():
        model(ids[None, :64], use_cache=False)
    runs = [measure(lambda: sequence_logprobs(model, seqs, P, batch_size=args.batch)) for _ in range(args.repeats)]
    est = scoring_passes(shape, ids.numel(), G, args.batch)
    rec = {k: statistics.median(r[k] for r in runs) for k in ("wall", "cpu")}
    print(json.dumps({**rec, "added": max(r["added"] for r in runs), "estimate": est, "G": G, "vocab": shape.vocab,
                      "scores": runs[-1]["out"].tolist()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gemma3-270m")
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--sequences", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--child", choices=MODES)
    args = ap.parse_args()
    if args.child:
        return child(args)
    res = {}
    for mode in MODES:
        cmd = [sys.executable, __file__, "--child", mode] + [f"--{k}={v}" for k, v in vars(args).items()
                                                             if k != "child"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        res[mode] = json.loads(out.strip().splitlines()[-1])
        r = res[mode]
        print(f"{mode:>6}: {r['wall']:7.1f} s wall {r['cpu']:7.1f} s CPU, added {r['added'] / GIB:5.2f} GiB "
              f"(estimate {r['estimate'] / GIB:5.2f} GiB)")
    w, s = res["whole"], res["sliced"]
    diff = float(np.max(np.abs(np.array(w["scores"]) - np.array(s["scores"]))))
    print(f"{args.model}, {args.length} tokens ({w['G']} generated, vocabulary {w['vocab']:,}), {args.sequences} "
          f"sequences, batch {args.batch}: sliced / whole wall {s['wall'] / w['wall']:.2f}x, CPU "
          f"{s['cpu'] / w['cpu']:.2f}x, memory added {s['added'] / max(w['added'], 1):.2f}x; "
          f"largest score difference {diff:.2e}")


if __name__ == "__main__":
    main()
