"""Shared fixtures. The real SmolLM2 model loads once per session from the packaged GGUF (dequantised cache under .cache/)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = ROOT / ".cache"


def without_timings(obj):
    """A results record (or a part of one) without its timing fields (``*_s``, ``*timings``), which differ per run."""
    if isinstance(obj, dict):
        return {k: without_timings(v) for k, v in obj.items() if not (k.endswith("_s") or k.endswith("timings"))}
    if isinstance(obj, list):
        return [without_timings(v) for v in obj]
    return obj


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct (fp32, CPU, eager attention) as a LoadedLM."""
    from ctxbench.models import ModelConfig, load_causal_lm

    return load_causal_lm(ModelConfig(device="cpu", dtype="float32"), need_attentions=True, cache_dir=CACHE_DIR)


@pytest.fixture(scope="session")
def smol_tokenizer():
    from ctxbench.models import ModelConfig
    from ctxbench.models.causal_lm import load_tokenizer

    return load_tokenizer(ModelConfig(), cache_dir=CACHE_DIR)


@pytest.fixture(scope="session")
def morehopqa_path() -> Path:
    """The 150-row MoreHopQA sample shipped inside the package (a missing file is a failure, not a skip)."""
    from ctxbench.datasets import morehopqa_sample

    path = morehopqa_sample()
    assert path.is_file(), f"the packaged MoreHopQA sample is missing: {path}"
    return path
