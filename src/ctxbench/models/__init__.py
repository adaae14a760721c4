"""Model loading: transformers causal LMs (hub id, folder, GGUF, packaged offline default) and OpenAI-compatible
endpoints."""

from ctxbench.models.spec import ModelConfig
from ctxbench.models.causal_lm import LoadedLM, load_causal_lm, resolve_source

__all__ = ["ModelConfig", "LoadedLM", "load_causal_lm", "resolve_source"]
