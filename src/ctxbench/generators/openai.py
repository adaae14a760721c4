"""``generator=openai``: an OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang); docs/sampling.md#openai.

The requests' ``messages`` are sent as they are (the server applies its chat template); concurrency, timeouts, retries
with back-off on 429/5xx and the on-disk response cache are the client's (``ctxbench.models.openai_client``). The key
is read from the environment variable ``api_key_env`` and never written anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from ctxbench.generators.base import Generation, GenerationRequest, Generator
from ctxbench.models.openai_client import ChatError, EndpointSettings
from ctxbench.core.part import param


@dataclass(kw_only=True)
class OpenAIGenerator(EndpointSettings, Generator):
    """Endpoint settings (``EndpointSettings``) plus ``max_new_tokens`` (sent as ``max_tokens``), ``temperature``
    (0 = greedy) and ``seed`` (sent when set; servers that honour it make sampling repeatable)."""

    name: ClassVar[str] = "openai"
    max_new_tokens: int = param(1024, ge=1)
    temperature: float = param(0.0, ge=0)
    seed: Optional[int] = None

    def __post_init__(self):
        self.check_endpoint()
        self._client = self.client()

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        for r in requests:
            if not r.messages:
                raise ValueError(f"request {r.key!r}: the openai generator needs chat messages")
        results = self._client.complete_many([r.messages for r in requests], max_tokens=self.max_new_tokens,
                                             temperature=self.temperature, seed=self.seed)
        out = []
        for req, res in zip(requests, results):
            if isinstance(res, ChatError):
                out.append(Generation(req.key, error=str(res)))
            else:
                out.append(Generation(req.key, text=res.text, finish_reason=res.finish_reason,
                                      prompt_tokens=res.prompt_tokens, completion_tokens=res.completion_tokens))
        return out

