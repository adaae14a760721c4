"""The prompts of FlashTrace's sampling stage (its sample_and_filter.py, verbatim) and the judge's answer parser."""

from __future__ import annotations

import re

# FlashTrace's system prompt of the generator model.
GENERATION_SYSTEM_PROMPT = (
    "You are a reasoning assistant. Before answering, engage in an chain of thought. Process this freely and "
    "naturally without using specific headers or strict formatting. When you reach the conclusion, wrap the entire "
    "final sentence containing the answer inside \\box{}. Ensure the box wraps the **sentence** that naturally "
    "delivers the answer. DO NOT rewrite the answer word for the box separately."
)

# FlashTrace's judge prompts.
JUDGE_SYSTEM_PROMPT = (
    "You verify whether the model's boxed answer matches the reference answer. "
    "Reply strictly with True or False and nothing else."
)


def judge_user_prompt(reference_answer: str, boxed_answer: str) -> str:
    return ("Decide if the model's boxed answer matches the reference answer.\n"
            f"Reference answer: {reference_answer}\n"
            f"Model boxed answer (only the content inside \\box{{}}): {boxed_answer}\n"
            "Output only True if they are semantically consistent; otherwise output False.")


def judge_messages(reference_answer: str, boxed_answer: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT},
            {"role": "user", "content": judge_user_prompt(reference_answer, boxed_answer)}]


_THINK_BLOCK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)


def parse_judge_response(text: str) -> bool:
    """FlashTrace's parse rule: the first line, lower-cased and stripped, in {true, yes} is True, in {false, no}
    False; otherwise a substring fallback: True when "true" occurs and "false" does not. A leading
    ``<think>...</think>`` block (reasoning models) is skipped first."""
    text = _THINK_BLOCK.sub("", text or "", count=1).strip()
    first = text.splitlines()[0].strip().lower() if text else ""
    if first in ("true", "yes"):
        return True
    if first in ("false", "no"):
        return False
    low = text.lower()
    return "true" in low and "false" not in low
