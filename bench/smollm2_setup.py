"""What the SmolLM2 benches share: the length and thread options, then the model (float32, CPU, from the project's
cache) and a model input of the requested lengths made by the bench's own ``make_input(tok, n_prompt, n_gen)``."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def add_length_args(ap: argparse.ArgumentParser, prompt_tokens: int, gen_tokens: int) -> None:
    ap.add_argument("--prompt-tokens", type=int, default=prompt_tokens)
    ap.add_argument("--gen-tokens", type=int, default=gen_tokens)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")


def load_smollm2_and_input(args: argparse.Namespace, make_input):
    """``(model, tokenizer, model_input)``, after setting ``args.threads`` (when not 0)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    from ctxbench.models import ModelConfig, load_causal_lm

    lm = load_causal_lm(ModelConfig(device="cpu", dtype="float32"), need_attentions=True, cache_dir=ROOT / ".cache")
    return lm.model, lm.tokenizer, make_input(lm.tokenizer, args.prompt_tokens, args.gen_tokens)
