"""What several parts ask of a tokenizer: its end-of-sequence ids (stop rules, padding, baselines), whether it has a
chat template."""

from __future__ import annotations

from ctxbench.utils.spans import tokenizer_name


def eos_ids(tokenizer) -> list[int]:
    """Every EOS id of the tokenizer (some declare a list), first the one used as padding; empty when it has none."""
    e = getattr(tokenizer, "eos_token_id", None)
    if e is None:
        return []
    return [int(x) for x in (e if isinstance(e, (list, tuple)) else [e])]


def eos_id(tokenizer) -> int:
    """The id that stands in for deleted tokens and baselines: the (first) EOS id, as FlashTrace's code uses."""
    ids = eos_ids(tokenizer)
    if not ids:
        raise ValueError(f"tokenizer {tokenizer_name(tokenizer)!r} has no EOS token to pad with")
    return ids[0]


def has_chat_template(tokenizer) -> bool:
    """Whether prompts are wrapped in the tokenizer's chat template (a base model's tokenizer has none: plain text)."""
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))
