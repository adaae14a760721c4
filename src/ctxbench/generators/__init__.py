"""Generators (the ``generator`` config group): ``hf`` (local transformers), ``openai`` (an OpenAI-compatible endpoint),
``replay`` (responses made elsewhere). One interface, ``ctxbench.generators.base.Generator``; docs/sampling.md."""

from ctxbench.generators.base import Generation, GenerationRequest, Generator

__all__ = ["Generation", "GenerationRequest", "Generator"]
