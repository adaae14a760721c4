"""AttnLRP cost on SmolLM2-135M (CPU): attnlrp and ft_attnlrp against one forward pass and input x gradient.

    python bench/bench_attnlrp.py [--prompt-tokens 500] [--gen-tokens 40] [--repeats 2] [--threads N]

The prompt is MoreHopQA text from the packaged sample, cut to exactly ``--prompt-tokens``; the generation is the next
``--gen-tokens`` - 1 tokens of the same text plus EOS (teacher forcing: only the lengths matter for the cost). Prints
the minimum over ``--repeats`` of the seconds of each method's ``attribute`` call, its ratio to one plain forward pass
(no gradient, eager) and to ``input_x_gradient`` (one forward, one backward per row: the same pattern as attnlrp),
and, for attnlrp, the share of each explained logit that reaches the input (sum of the row over all positions / logit;
the rest stays with the softmax Taylor terms, SmolLM2 has no biases).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from smollm2_setup import add_length_args, load_smollm2_and_input


def make_input(tok, n_prompt: int, n_gen: int):
    from ctxbench.datasets import morehopqa_sample
    from ctxbench.prompts.formats import ModelInput

    rows = json.loads(Path(morehopqa_sample()).read_text())
    text = " ".join("".join(s) for r in rows for _, s in r["context"])
    ids = tok(text, add_special_tokens=False).input_ids[:n_prompt + n_gen - 1] + [tok.eos_token_id]
    return ModelInput(input_ids=torch.tensor(ids), prompt_positions=torch.arange(n_prompt), prompt_offsets=[],
                      gen_start=n_prompt, text="")


def best_of(repeats: int, fn):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main():
    ap = argparse.ArgumentParser()
    add_length_args(ap, prompt_tokens=500, gen_tokens=40)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    model, tok, mi = load_smollm2_and_input(args, make_input)

    from ctxbench.attribution import InputXGradientAttributor
    from ctxbench.attribution.attnlrp import AttnLRPAttributor, FTAttnLRPAttributor, LRPPass
    from ctxbench.attribution.base import InputContext
    print(f"SmolLM2-135M, CPU, {torch.get_num_threads()} threads, {args.prompt_tokens} prompt + {args.gen_tokens} "
          f"generated tokens, minimum of {args.repeats}")

    with torch.no_grad():
        fwd, _ = best_of(args.repeats, lambda: model(input_ids=mi.input_ids[None], use_cache=False))
    runs = {"input_x_gradient": InputXGradientAttributor(),
            "attnlrp (eager)": AttnLRPAttributor(forward_attn_impl=None),
            "attnlrp (sdpa)": AttnLRPAttributor(),
            "attnlrp (sdpa, row_batch=8)": AttnLRPAttributor(row_batch=8),
            "ft_attnlrp hops=1": FTAttnLRPAttributor(hops=1),
            "ft_attnlrp hops=3": FTAttnLRPAttributor(hops=3)}
    sink, think = (args.gen_tokens - 11, args.gen_tokens - 2), (0, args.gen_tokens - 12)
    times, results = {}, {}
    for name, method in runs.items():
        times[name], results[name] = best_of(args.repeats, lambda: method.attribute(model, tok, mi, sink, think))
    print(f"{'method':30s} {'seconds':>8s} {'/ forward':>10s} {'/ input_x_gradient':>19s}")
    print(f"{'forward pass':30s} {fwd:8.2f} {1.0:10.2f}")
    for name, sec in times.items():
        print(f"{name:30s} {sec:8.2f} {sec / fwd:10.2f} {sec / times['input_x_gradient']:19.2f}")

    # input share of each logit: the relevance of the whole input (template included) over the logit
    ctx = InputContext.from_model_input(model, mi)
    for p in model.parameters():
        p.requires_grad_(False)
    lp = LRPPass(model, ctx, 0.0, "sdpa")
    eye = torch.eye(ctx.G)
    share = torch.stack([lp.relevance(eye[t]).sum() / lp.logits[t].detach() for t in range(ctx.G)])
    q = torch.quantile(share, torch.tensor([0.0, 0.5, 1.0]))
    print(f"attnlrp input relevance / logit over the {ctx.G} rows: min {q[0]:.3f}, median {q[1]:.3f}, max {q[2]:.3f}")


if __name__ == "__main__":
    main()
