"""Logits at the positions that predict a generated continuation (teacher forcing), the shared first step of the
deletion passes, the ablation passes and the gradient baselines."""

from __future__ import annotations

import inspect

import torch


def _accepts(model, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def predicting_logits(model, gen_start: int, *, input_ids: torch.Tensor = None,
                      inputs_embeds: torch.Tensor = None) -> torch.Tensor:
    """float32 logits (B, G, V) at positions gen_start - 1 .. T - 2, those that predict tokens gen_start .. T - 1, of
    a batch given as ``input_ids`` (B, T) or ``inputs_embeds`` (B, T, d).

    The last token predicts nothing scored, so it is not fed; ``logits_to_keep`` (where the model takes it) skips the
    vocabulary projection over the prompt, forward and backward (SmolLM2: a 576 x 49,152 product per position, about
    a fifth of the model's multiply-adds)."""
    x = input_ids if input_ids is not None else inputs_embeds
    g = x.shape[1] - gen_start
    kw = {"input_ids": x[:, :-1]} if input_ids is not None else {"inputs_embeds": x[:, :-1]}
    if _accepts(model, "logits_to_keep"):
        kw["logits_to_keep"] = g
    if _accepts(model, "use_cache"):  # no key/value cache to build for a single pass
        kw["use_cache"] = False
    return model(**kw).logits[:, -g:, :].float()  # float32: fp16/bf16 underflow small probabilities
