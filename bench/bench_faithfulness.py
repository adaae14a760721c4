"""Faithfulness cost per example, in forward-pass equivalents: SmolLM2-135M on CPU, ~1000-token prompt.

    python bench/bench_faithfulness.py [--prompt-tokens 1000] [--gen-tokens 100] [--batch-size 4] [--repeats 2]

One unit = one plain forward pass over prompt + target with the model as the run stage loads it (eager attention,
logits at every position); the ratio to the same pass with sdpa attention is printed too. Two cases, three views each:
  (a) seq and row rank alike, rec differs (IFR-like methods write one vector into every row)  goal < 25
  (b) three distinct rankings                                                                 goal < 45
Prints the distinct deleted inputs scored, forward passes (batches), seconds and the ratio. Then (c), Table 1's shape:
``--methods`` methods scored one after another on the example, one view each, with the scores of the inputs they
share kept from one method to the next (as the scorer does) against each method scored afresh, and the ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from smollm2_setup import add_length_args, load_smollm2_and_input


def make_input(tok, n_prompt: int, n_gen: int):
    """Random token ids of exact lengths (the cost does not depend on the text), a short template prefix, EOS last."""
    from ctxbench.prompts.formats import ModelInput

    g = torch.Generator().manual_seed(0)
    template = 8
    ids = torch.randint(100, len(tok), (template + n_prompt + n_gen,), generator=g)
    ids[-1] = tok.eos_token_id
    return ModelInput(input_ids=ids, prompt_positions=torch.arange(template, template + n_prompt), prompt_offsets=[],
                      gen_start=template + n_prompt, text="")


def best_of(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_length_args(ap, prompt_tokens=1000, gen_tokens=100)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--attn", default="sdpa", help="attention kernel of the deletion passes ('none': the model's)")
    ap.add_argument("--methods", type=int, default=8, help="methods of case (c), one view each (0: skip it)")
    args = ap.parse_args()
    model, tok, mi = load_smollm2_and_input(args, make_input)

    from ctxbench.metrics.faithfulness import faithfulness_for_views
    from ctxbench.models.attention import attention_kernel
    rng = np.random.default_rng(0)
    w1, w2, w3 = (rng.random(mi.P) for _ in range(3))
    cases = {"a: seq==row, rec": {"seq": w1, "row": 2 * w1, "rec": w2},
             "b: three rankings": {"seq": w1, "row": w2, "rec": w3}}
    attn = None if args.attn == "none" else args.attn

    with torch.inference_mode():
        forward = best_of(lambda: model(mi.input_ids[None]), args.repeats)
    print(f"model {type(model).__name__} ({model.config._attn_implementation}), threads {torch.get_num_threads()}, "
          f"T={mi.input_ids.numel()} (P={mi.P}, G={mi.G}), batch {args.batch_size}, deletion attention {attn}")
    print(f"one forward pass: {forward:.3f} s")
    timings = {}
    for name, views in cases.items():
        stats: dict = {}
        secs = best_of(lambda: faithfulness_for_views(model, mi, views, tok.eos_token_id, batch_size=args.batch_size,
                                                      attn_implementation=attn, stats=stats), args.repeats)
        timings[name] = secs
        print(f"({name}) {stats['sequences']} distinct inputs of {stats['requested']} requested, "
              f"{stats['forward_passes']} forward passes, {secs:.2f} s = {secs / forward:.1f} forward-pass equivalents")
    with torch.inference_mode():
        forward2 = best_of(lambda: model(mi.input_ids[None]), args.repeats)
        # The same pass with the fused kernel: a stricter unit, since eager attention is the slow part on CPU.
        with attention_kernel(model, "sdpa"):
            fused = best_of(lambda: model(mi.input_ids[None]), args.repeats)
    print(f"one forward pass again: {forward2:.3f} s (noise check); with sdpa attention: {fused:.3f} s")
    for name, secs in timings.items():
        print(f"({name}) {secs / min(forward, forward2):.1f} eager / {secs / fused:.1f} sdpa forward-pass equivalents")
    if args.methods:
        methods_case(model, tok, mi, args, attn, rng)


def methods_case(model, tok, mi, args, attn, rng) -> None:
    """(c): the same methods' deletion passes with and without the inputs they share kept between them, alternated
    ``repeats`` times so that both see the same machine."""
    from ctxbench.metrics.faithfulness import faithfulness_for_views

    weights = [rng.random(mi.P) for _ in range(args.methods)]

    def score_all(shared: bool) -> tuple[int, int]:
        known: dict = {}
        inputs = passes = 0
        for w in weights:
            stats: dict = {}
            faithfulness_for_views(model, mi, {"row": w}, tok.eos_token_id, batch_size=args.batch_size,
                                   attn_implementation=attn, stats=stats, known=known if shared else None)
            inputs, passes = inputs + stats["sequences"], passes + stats["forward_passes"]
        return inputs, passes

    secs: dict = {True: [], False: []}
    counts = {}
    for _ in range(args.repeats):
        for shared in (False, True):
            t0 = time.perf_counter()
            counts[shared] = score_all(shared)
            secs[shared].append(time.perf_counter() - t0)
    for shared, label in ((False, "each afresh"), (True, "shared inputs kept")):
        print(f"(c: {args.methods} methods, {label}) {counts[shared][0]} inputs run, {counts[shared][1]} forward "
              f"passes, {min(secs[shared]):.2f} s")
    print(f"(c) kept / afresh: {min(secs[True]) / min(secs[False]):.3f} of the time, "
          f"{counts[True][1] / counts[False][1]:.3f} of the passes")


if __name__ == "__main__":
    main()
