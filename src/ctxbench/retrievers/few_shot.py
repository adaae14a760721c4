"""Few-shot prompts: retrieve in-context examples for each row and render what the model is sent.

The one path shared by the sampling stage and ``preview_prompts``, so the preview shows exactly what sampling sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ctxbench.prompts.icl import ICLTemplate, ModelPrompt
from ctxbench.retrievers.base import Retrieved, Retriever


@dataclass(frozen=True)
class FewShotPrompt:
    """One row's prompt: the retrieved pool hits (``ids`` their pool ids) and what the model is sent."""

    hits: Retrieved
    ids: list[str]
    n_examples: int
    prompt: ModelPrompt


def few_shot_prompts(retriever: Retriever, template: ICLTemplate, pool: Sequence[dict], rows: Sequence[dict],
                     tokenizer: Any = None, chat_endpoint: bool = False) -> list[FewShotPrompt]:
    """``retriever`` must already be fitted on ``pool``. ``tokenizer``: its chat template renders the text (plain text
    without one); ``chat_endpoint``: the messages go to an OpenAI-compatible server that applies its own template."""
    out = []
    for row, hits in zip(rows, retriever.retrieve(list(rows))):
        rendered = template.render(row, [pool[i] for i in hits.indices])
        if chat_endpoint:
            msgs, open_turn = rendered.messages()
            mp = ModelPrompt(text=rendered.text, messages=msgs, add_generation_prompt=not open_turn,
                             continue_final_message=open_turn)
        else:
            mp = rendered.for_model(tokenizer)
        out.append(FewShotPrompt(hits, retriever.ids_of(hits), rendered.n_examples, mp))
    return out
