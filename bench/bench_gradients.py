"""Gradient baselines on SmolLM2-135M (CPU): input x gradient and one batch of integrated-gradients points, with the
gradient passes on sdpa (the default) against the model's own eager attention, paired in one process.

    python bench/bench_gradients.py [--prompt-tokens 1024] [--gen-tokens 40] [--ig-batch 4] [--rounds 2] [--threads N]

Input as in bench_attnlrp.py (MoreHopQA text; only the lengths matter). Each method costs one forward pass per batch
of points, then one backward pass per generated token, so the seconds per generated token are printed too; the two
kernels alternate within each round so that drift of a shared machine falls on both. A Table-1 IG example costs
(ig_steps / ig_batch) times the IG line.
"""

from __future__ import annotations

import argparse
import time

import torch
from bench_attnlrp import make_input
from smollm2_setup import add_length_args, load_smollm2_and_input


def main():
    ap = argparse.ArgumentParser()
    add_length_args(ap, prompt_tokens=1024, gen_tokens=40)
    ap.add_argument("--ig-batch", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    model, tok, mi = load_smollm2_and_input(args, make_input)

    from ctxbench.attribution import InputXGradientAttributor, IntegratedGradientsAttributor
    G = args.gen_tokens
    print(f"SmolLM2-135M, CPU, {torch.get_num_threads()} threads, {args.prompt_tokens} prompt + {G} generated tokens, "
          f"model loaded with {model.config._attn_implementation} attention; {args.rounds} rounds")
    methods = {
        "input_x_gradient": lambda impl: InputXGradientAttributor(attn_implementation=impl),
        f"integrated_gradients, one batch of {args.ig_batch} points": lambda impl: IntegratedGradientsAttributor(
            ig_steps=args.ig_batch, ig_batch=args.ig_batch, attn_implementation=impl)}
    print(f"{'method':44s} {'kernel':>6s} {'seconds':>8s} {'s / token':>10s} {'eager / sdpa':>13s}")
    for name, make in methods.items():
        times = {"sdpa": [], "eager": []}
        for _ in range(args.rounds):
            for impl in ("sdpa", None):
                t0 = time.perf_counter()
                make(impl).attribute(model, tok, mi, (G // 2, G - 1), (0, G // 2 - 1))  # spans unused here
                times["sdpa" if impl else "eager"].append(time.perf_counter() - t0)
        best = {k: min(v) for k, v in times.items()}
        for k in ("sdpa", "eager"):
            ratio = f"{best['eager'] / best['sdpa']:13.2f}" if k == "eager" else ""
            print(f"{name:44s} {k:>6s} {best[k]:8.1f} {best[k] / G:10.2f} {ratio}")


if __name__ == "__main__":
    main()
