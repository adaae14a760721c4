"""Sentence-ablation passes through an OpenAI-compatible endpoint against the same passes on the loaded model.

    python bench/bench_endpoint.py [--prompt-tokens 500] [--gen-tokens 20] [--ablations 16] [--threads 1]
        [--base-url http://host:8000/v1 --model-name NAME]

Without ``--base-url`` the endpoint is the test suite's completions server (tests/helpers/completions_server.py:
SmolLM2 behind a real HTTP server on 127.0.0.1, one full forward pass per prompt), started here in this process, so
the figure is the protocol's overhead on the same CPU, not a served model's speed; with ``--base-url`` the passes go
to that server (vLLM on a GPU machine) and the local SmolLM2 is the baseline. Scores ``--ablations``
leave-one-sentence-out inputs as ``perturbation`` does (``attribution.perturbation.ablated_token_scores``), first on
the loaded model, then through ``models.endpoint_lm.EndpointLM`` (no response cache); prints passes per second of
both, their ratio and the largest difference of the scores.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import numpy as np
import torch
from bench_ablation import make_input
from smollm2_setup import add_length_args, load_smollm2_and_input

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_length_args(ap, prompt_tokens=500, gen_tokens=20)
    ap.add_argument("--ablations", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=4, help="local passes per batch, and prompts per request")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--base-url", default=None)
    ap.add_argument("--model-name", default="smollm2")
    args = ap.parse_args()
    model, tok, mi = load_smollm2_and_input(args, make_input)

    from ctxbench.attribution.base import InputContext
    from ctxbench.attribution.perturbation import SentenceUnits, ablated_token_scores
    from ctxbench.models.endpoint_lm import EndpointLM
    from helpers.completions_server import CompletionsServer

    ctx = InputContext.from_model_input(model, mi)
    units = SentenceUnits.of(tok, ctx)
    pick = np.unique(np.linspace(0, len(units.prompt) - 1, args.ablations).round().astype(int))
    ablations = [units.prompt_positions(ctx, int(u)) for u in pick]
    n = len(ablations) + 1  # and the intact input
    print(f"T = {ctx.T} tokens ({ctx.P} prompt, {ctx.G} generated), {n} inputs, {torch.get_num_threads()} threads")
    t0 = time.perf_counter()
    local = ablated_token_scores(model, ctx.input_ids, ctx.gen_start, ablations, tok.eos_token_id, args.batch_size)
    t_local = time.perf_counter() - t0
    server = contextlib.nullcontext() if args.base_url else CompletionsServer(model, tok, args.model_name)
    with server as srv:
        url = args.base_url or srv.base_url
        lm = EndpointLM(url, args.model_name, tok, api_key_env=None, concurrency=args.concurrency,
                        prompts_per_request=args.batch_size)
        t0 = time.perf_counter()
        remote = ablated_token_scores(lm, ctx.input_ids, ctx.gen_start, ablations, tok.eos_token_id, args.batch_size)
        t_remote = time.perf_counter() - t0
    print(f"  local model : {t_local:7.2f} s, {n / t_local:6.2f} passes/s")
    print(f"  endpoint    : {t_remote:7.2f} s, {n / t_remote:6.2f} passes/s ({lm.requests} requests, {url})")
    diff = max(np.abs(local[0] - remote[0]).max(), np.abs(local[1] - remote[1]).max())
    print(f"ratio endpoint / local time: {t_remote / t_local:.3f}; largest score difference {diff:.2e}")


if __name__ == "__main__":
    main()
