"""A chat client for an OpenAI-compatible endpoint (OpenAI, vLLM, SGLang). The API key comes from the environment."""

from __future__ import annotations

import os
from typing import Any

from ctxbench.models.spec import ModelConfig


def api_key(cfg: ModelConfig) -> str:
    key = os.environ.get(cfg.api_key_env)
    if not key:
        raise RuntimeError(f"model '{cfg.name}': environment variable {cfg.api_key_env} is not set "
                           f"(model.api_key_env names the variable that holds the API key)")
    return key


class OpenAIChat:
    """``complete(messages) -> str`` against ``cfg.base_url`` with ``cfg.model_name``; temperature from the config."""

    def __init__(self, cfg: ModelConfig):
        if not cfg.base_url or not cfg.model_name:
            raise ValueError(f"model '{cfg.name}': backend=openai needs model.base_url and model.model_name")
        from openai import OpenAI

        self.cfg = cfg
        self._client = OpenAI(base_url=cfg.base_url, api_key=api_key(cfg), timeout=cfg.timeout_s)

    def complete(self, messages: list[dict[str, str]], **kwargs: Any) -> str:
        resp = self._client.chat.completions.create(
            model=self.cfg.model_name, messages=messages, temperature=self.cfg.temperature,
            max_tokens=kwargs.pop("max_tokens", self.cfg.max_new_tokens), **kwargs)
        return resp.choices[0].message.content or ""
