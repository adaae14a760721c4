"""Decoder families, one module each (``base.FamilyAdapter`` says what a family provides). A new family is one
module here plus its entry in ``FAMILIES``."""

from __future__ import annotations

from typing import Optional

import torch

from ctxbench.attribution.families.base import FamilyAdapter, UnsupportedModelError, capture_dtype
from ctxbench.attribution.families.gemma3 import Gemma3Adapter
from ctxbench.attribution.families.gpt2 import GPT2Adapter
from ctxbench.attribution.families.llama import LlamaLikeAdapter

# asked in order; the first whose matches(model) is true reads the model
FAMILIES: tuple[type[FamilyAdapter], ...] = (GPT2Adapter, Gemma3Adapter, LlamaLikeAdapter)


def adapter_for(model, dtype: Optional[torch.dtype] = None) -> FamilyAdapter:
    dtype = capture_dtype(model) if dtype is None else dtype
    for family in FAMILIES:
        if family.matches(model):
            return family(model, dtype)
    mtype = getattr(model.config, "model_type", "")
    raise UnsupportedModelError(f"model_type={mtype!r}: IFR supports {family_names()}")


def family_names() -> str:
    """The families ``adapter_for`` reads, as a refusal names them."""
    labels = [f.label for f in reversed(FAMILIES)]  # the catch-all Llama-like family first
    return ", ".join(labels[:-1]) + " and " + labels[-1] if len(labels) > 1 else "".join(labels)


def tiny_configs(vocab_size: int) -> dict:
    """Every family's tiny test decoders (``FamilyAdapter.tiny_configs``), ``{member: config}``."""
    return {name: cfg for family in FAMILIES for name, cfg in family.tiny_configs(vocab_size).items()}


__all__ = ["FAMILIES", "FamilyAdapter", "GPT2Adapter", "Gemma3Adapter", "LlamaLikeAdapter", "UnsupportedModelError",
           "adapter_for", "capture_dtype", "family_names", "tiny_configs"]
