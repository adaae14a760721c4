"""The model input of the attribution stage: formatted prompt + the generation to explain (docs/data.md, prompt
formats).

``table1``: FlashTrace's Table-1 setting, user message ``"Context: " + prompt + "\\n\\n\\nQuery: "`` inside the model's
chat template (generation prompt on, thinking off); a tokenizer without a chat template (a base model such as Gemma 3
270M) gets the same message as plain text after the tokenizer's own special tokens (BOS), as the sampling stage sends
it. ``bare``: the prompt alone, no chat template. The whole formatted
text is tokenised at once (what the model really sees); prompt tokens are the tokens whose characters overlap the prompt
inside it, and their offsets are mapped back into the prompt string, so evidence spans given in prompt characters need
no further shift.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ctxbench.utils.spans import tokens_overlapping
from ctxbench.utils.tokens import eos_id, has_chat_template

PROMPT_FORMATS = ("table1", "bare")
TABLE1_PREFIX = "Context: "
TABLE1_SUFFIX = "\n\n\nQuery: "


@dataclass
class ModelInput:
    input_ids: torch.Tensor  # (T,) formatted prompt tokens, then the G generated tokens (target tokens + EOS)
    # (P,) positions of the user-prompt tokens inside input_ids (template tokens excluded)
    prompt_positions: torch.Tensor
    prompt_offsets: list  # P pairs [start, end): each prompt token's characters in the prompt string (clipped to it)
    gen_start: int  # input_ids[gen_start:] are the generated tokens
    text: str  # the formatted text before the generated tokens (for inspection)
    # prompt-token indices (0..P-1) of the question where the data marks it (metadata.question_char_span), else None
    query_tokens: Optional[list] = None

    @property
    def P(self) -> int:
        return int(self.prompt_positions.numel())

    @property
    def G(self) -> int:
        return int(self.input_ids.numel()) - self.gen_start

    @property
    def gen_ids(self) -> torch.Tensor:
        return self.input_ids[self.gen_start:]


def format_prompt_text(tokenizer, prompt: str, prompt_format: str) -> tuple[str, int]:
    """The formatted text and the character offset of ``prompt`` inside it."""
    if prompt_format == "bare":
        return prompt, 0
    if prompt_format != "table1":
        raise ValueError(f"prompt_format={prompt_format!r}: expected one of {PROMPT_FORMATS}")
    user = TABLE1_PREFIX + prompt + TABLE1_SUFFIX
    if not has_chat_template(tokenizer):  # a base model: the Table-1 message as plain text
        return user, len(TABLE1_PREFIX)
    text = tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=False)
    where = text.find(user)
    if where < 0:
        raise ValueError("the chat template altered the user message; cannot locate the prompt inside it")
    return text, where + len(TABLE1_PREFIX)


def build_model_input(tokenizer, prompt: str, target: str, prompt_format: str = "table1") -> ModelInput:
    text, start = format_prompt_text(tokenizer, prompt, prompt_format)
    # The chat template writes its own special tokens; plain text gets what the tokenizer adds by default (BOS).
    plain = prompt_format == "bare" or not has_chat_template(tokenizer)
    enc = tokenizer(text, add_special_tokens=plain, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    end = start + len(prompt)
    positions = tokens_overlapping(offsets, start, end)
    if not positions:
        raise ValueError("the prompt produced no tokens")
    prompt_offsets = [[max(offsets[i][0], start) - start, min(offsets[i][1], end) - start] for i in positions]
    gen = tokenizer(target, add_special_tokens=False)["input_ids"] + [eos_id(tokenizer)]
    return ModelInput(input_ids=torch.tensor(ids + gen, dtype=torch.long),
                      prompt_positions=torch.tensor(positions, dtype=torch.long),
                      prompt_offsets=prompt_offsets, gen_start=len(ids), text=text)
