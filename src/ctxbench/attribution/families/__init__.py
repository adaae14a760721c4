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
    raise UnsupportedModelError(f"model_type={mtype!r}: IFR supports Llama/Mistral/Qwen2/Qwen3-like decoders, "
                                f"Gemma 3 and GPT-2")


__all__ = ["FAMILIES", "FamilyAdapter", "GPT2Adapter", "Gemma3Adapter", "LlamaLikeAdapter", "UnsupportedModelError",
           "adapter_for", "capture_dtype"]
