"""The Generator interface (the ``generator`` config group): chat requests in, responses out, one per request.

A generator is a class reached by ``_target_`` from ``conf/generator/<name>.yaml``; its constructor's typed keywords are
its parameters. ``generate(requests)`` answers every request in order; a request that fails yields a ``Generation``
with ``error`` set (one line) instead of raising, so one bad request never loses the others. Generators that run the
local model (``needs_lm``) get it through ``use_lm(loaded_lm)`` before the first ``generate`` (the stage loads the
``model`` group once and hands it over); the others ignore it (``ctxbench.core.part.Part``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional
from ctxbench.core.part import Part


def one_line(text: Any, limit: int = 300) -> str:
    """An error message on one line (newlines folded, long text cut)."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[:limit - 3] + "..."


@dataclass(frozen=True)
class GenerationRequest:
    """``key``: a stable id (the example id); ``messages``: the chat ``[{role, content}, ...]`` (system prompt,
    in-context user/assistant turns, the user prompt); ``text``: the same prompt already rendered with the chat
    template, when the caller has it (the ``hf`` generator then uses it as is; ``replay`` may match on it); ``row``: the
    dataset row (a ``CachedExample``) the request was made from, for generators that write from the data
    (``evidence_cot``)."""

    key: str
    messages: list = field(default_factory=list)
    text: Optional[str] = None
    row: Any = field(default=None, compare=False)

    def user_prompt(self) -> Optional[str]:
        """The content of the last user message."""
        for m in reversed(self.messages):
            if m.get("role") == "user":
                return m.get("content")
        return None


@dataclass
class Generation:
    """The response to one request. ``finish_reason``: ``stop`` (EOS / the model stopped), ``length``
    (``max_new_tokens`` reached), ``replay``, or what the endpoint said; ``error``: None, or a one-line reason (then
    ``text`` is empty). Token counts are None when unknown. ``forced``: what a decoding guard wrote instead of the model
    (``BoxGuard``: ``open_box``, ``close_box``, ``end_after_box``), in order; empty when the model chose every token."""

    key: str
    text: str = ""
    finish_reason: Optional[str] = None
    error: Optional[str] = None
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    forced: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "text": self.text, "finish_reason": self.finish_reason, "error": self.error,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "forced": list(self.forced)}


class Generator(Part, ABC):
    """Subclasses are dataclasses (their fields are the parameters) with a ``name``; ``needs_lm``: runs the `model`
    group's model locally (the stage loads it and hands it over with ``use_lm``)."""

    name: ClassVar[str] = ""

    def check(self, examples: list, dataset: str) -> None:
        """Raise ``ExampleRefused`` when this generator cannot answer the dataset at all (called before any model
        loads)."""

    @abstractmethod
    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        """One Generation per request, in the same order, keys matching."""
