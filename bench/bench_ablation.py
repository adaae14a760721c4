"""Sentence-ablation passes (perturbation, ContextCite) with and without the intact input's shared prefix.

    python bench/bench_ablation.py [--prompt-tokens 1000] [--gen-tokens 40] [--ablations 40] [--threads 1]

The prompt is RULER-style filler ("The grass is green. ...") cut to ``--prompt-tokens``, the generation random tokens;
``--ablations`` leave-one-sentence-out ablations spread evenly over the prompt's sentences (0: all of them), scored as
``perturbation`` does, first with every batch run from position 0, then from each batch's first change (the intact
pass's keys and values reused before it). Prints both times, their ratio and the largest difference of the scores.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from smollm2_setup import add_length_args, load_smollm2_and_input

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "


def make_input(tok, n_prompt: int, n_gen: int):
    from ctxbench.prompts.formats import ModelInput

    text_ids = tok(FILLER * (n_prompt // 6 + 1))["input_ids"][:n_prompt]
    gen = torch.randint(100, len(tok), (n_gen,), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([torch.as_tensor(text_ids), gen])
    return ModelInput(input_ids=ids, prompt_positions=torch.arange(n_prompt), prompt_offsets=[], gen_start=n_prompt,
                      text="")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_length_args(ap, prompt_tokens=1000, gen_tokens=40)
    ap.add_argument("--ablations", type=int, default=40, help="sentences ablated, evenly spread (0: all)")
    ap.add_argument("--batch-size", type=int, default=4)
    args = ap.parse_args()
    model, tok, mi = load_smollm2_and_input(args, make_input)

    from ctxbench.attribution.base import InputContext
    from ctxbench.attribution.perturbation import SentenceUnits, ablated_token_scores
    ctx = InputContext.from_model_input(model, mi)
    units = SentenceUnits.of(tok, ctx)
    pick = range(len(units.prompt)) if args.ablations <= 0 else \
        np.unique(np.linspace(0, len(units.prompt) - 1, args.ablations).round().astype(int))
    ablations = [units.prompt_positions(ctx, int(u)) for u in pick]
    print(f"T = {ctx.T} tokens ({ctx.P} prompt, {ctx.G} generated), {len(units.prompt)} prompt sentences, "
          f"{len(ablations)} ablated, batch {args.batch_size}, {torch.get_num_threads()} threads")
    results, secs = {}, {}
    for share in (False, True):
        t0 = time.perf_counter()
        results[share] = ablated_token_scores(model, ctx.input_ids, ctx.gen_start, ablations, tok.eos_token_id,
                                              args.batch_size, share_prefix=share)[1]
        secs[share] = time.perf_counter() - t0
        print(f"  {'shared prefix' if share else 'whole passes '}: {secs[share]:7.1f} s")
    print(f"ratio shared / whole: {secs[True] / secs[False]:.3f}; "
          f"largest score difference {np.abs(results[True] - results[False]).max():.2e}")


if __name__ == "__main__":
    main()
