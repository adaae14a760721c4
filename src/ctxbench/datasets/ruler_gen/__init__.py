"""RULER-format data generated offline, with evidence spans (``needle_spans``). See docs/ruler.md.

Public API:
- ``TASKS``: task name -> ``TaskSpec`` (the 11 RULER tasks of FlashTrace's Table 1, ``REFERENCE_TASKS`` plus
  upstream's niah_single_1/2/3 and niah_multikey_1/2/3).
- ``generate_task(task, *, tokenizer, max_seq_length, num_samples, seed=42, morehopqa_path=None, ...) -> list[dict]``
- ``write_task(root, task, *, max_seq_length, tokenizer, ...) -> Path``:
  ``<root>/<max_seq_length>/<task>/validation.jsonl``.

Conventions (see ``common`` for the ``needle_spans`` fields): token counts are without special tokens (upstream's
``text_to_tokens``). The length rule is upstream's: ``length`` = tokens of input + answer prefix, + tokens_to_generate
(niah 128, vt 30, qa 32), <= max_seq_length. With ``reserve_gold=True`` (the default) a gold answer longer than
tokens_to_generate (vt_h10_c1) has its own tokens kept free instead, so that input + prefix + gold answer also fits
(``length`` keeps upstream's meaning). ``length_w_model_temp`` = length + the chat template's tokens when
``chat_template=True`` (those tokens are then also taken off the budget, as upstream's ``model_template_token``), else
= length. ``token_position_answer`` = tokens of ``input[:input.find(outputs[0])]`` for every family (null when the
answer does not occur in the input, which can happen for qa). ``tokenizer`` = the tokenizer the lengths were fitted with
(name and vocabulary sha256; the loader warns when a file is used with another one). Each sample depends only on
(seed, task, index) and the tokenizer, so samples are reproducible one by one and files are byte-identical run to run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from ctxbench.core.errors import UnknownDatasetError
from ctxbench.utils.files import atomic_write_text
from ctxbench.utils.tokens import has_chat_template

from . import niah, qa, vt
from .common import answer_token_position, make_record
from .length import Fit, TokenCounter, tokenizer_record

__all__ = ["TASKS", "REFERENCE_TASKS", "TaskSpec", "generate_task", "generate_task_with_fits", "write_task",
           "task_spec", "task_path", "TokenCounter", "tokenizer_record"]


@dataclass(frozen=True)
class TaskSpec:
    family: str                                   # niah | vt | qa
    params: Union[niah.NiahParams, vt.VtParams, qa.QaParams]

    @property
    def tokens_to_generate(self) -> int:
        return self.params.tokens_to_generate


def _niah(**kw) -> TaskSpec:
    return TaskSpec("niah", niah.NiahParams(**kw))


TASKS: dict[str, TaskSpec] = {}
# Multi-query: q keys, all queried (so every inserted needle is evidence); multi-value: one key with v values.
# Both on the essay haystack with word keys and number values, like upstream's niah_multiquery / niah_multivalue.
for _q in (2, 4, 8):
    TASKS[f"niah_mq_q{_q}"] = _niah(haystack="essay", num_k=_q, num_q=_q)
for _v in (2, 4, 8):
    TASKS[f"niah_mv_v{_v}"] = _niah(haystack="essay", num_v=_v)
for _h, _c in ((2, 3), (4, 1), (6, 1), (10, 1)):
    TASKS[f"vt_h{_h}_c{_c}"] = TaskSpec("vt", vt.VtParams(num_hops=_h, num_chains=_c))
TASKS["hotpotqa_long"] = TaskSpec("qa", qa.QaParams())
REFERENCE_TASKS: tuple[str, ...] = tuple(TASKS)
# Upstream RULER's synthetic.yaml variants.
TASKS.update({
    "niah_single_1": _niah(haystack="noise"),
    "niah_single_2": _niah(haystack="essay"),
    "niah_single_3": _niah(haystack="essay", type_v="uuids"),
    "niah_multikey_1": _niah(haystack="essay", num_k=4),
    "niah_multikey_2": _niah(haystack="needle"),
    "niah_multikey_3": _niah(haystack="needle", type_k="uuids", type_v="uuids"),
})


def task_spec(task: str) -> TaskSpec:
    try:
        return TASKS[task]
    except KeyError:
        raise UnknownDatasetError(f"unknown RULER task {task!r}; known tasks: {', '.join(TASKS)}") from None


def _template_tokens(tokenizer, counter: TokenCounter) -> int:
    if not has_chat_template(tokenizer):
        return 0
    probe = "x"
    out = tokenizer.apply_chat_template([{"role": "user", "content": probe}], add_generation_prompt=True, tokenize=True)
    ids = out["input_ids"] if hasattr(out, "keys") else out
    return max(0, len(ids) - counter.count(probe))


def generate_task_with_fits(task: str, *, tokenizer=None, max_seq_length: int, num_samples: int, seed: int = 42,
                            morehopqa_path: Optional[Union[str, Path]] = None, chat_template: bool = False,
                            start_index: int = 0, counter: Optional[TokenCounter] = None,
                            reserve_gold: bool = True) -> tuple[list[dict], list[Fit]]:
    """``generate_task`` plus each sample's length fit (tokens of input + answer prefix, budget, size of the first unit
    left out)."""
    spec = task_spec(task)
    if counter is None:
        if tokenizer is None:
            raise ValueError("generate_task needs a tokenizer (or a TokenCounter)")
        counter = TokenCounter(tokenizer)
    if spec.family == "qa" and morehopqa_path is None:
        raise ValueError(f"{task} needs morehopqa_path: a MoreHopQA-format JSON file (gold and distractor paragraphs)")
    template_tokens = _template_tokens(counter.tokenizer, counter) if chat_template else 0
    budget = max_seq_length - spec.tokens_to_generate - template_tokens
    extra: dict = {"reserve_gold": reserve_gold}
    if spec.family == "vt":
        extra["icl_layout"] = vt.icl_layout(spec.params, counter, vt.icl_budget(max_seq_length), seed, task)
        extra["units"] = vt.noise_units(spec.params, counter=counter, budget=budget, seed=seed, task=task,
                                        icl_layout=extra["icl_layout"], reserve_gold=reserve_gold)
    elif spec.family == "qa":
        extra["morehopqa_path"] = morehopqa_path
        extra["rows_order"] = qa.row_order(spec.params, counter=counter, budget=budget, seed=seed, task=task,
                                           morehopqa_path=morehopqa_path, reserve_gold=reserve_gold)
    family = {"niah": niah, "vt": vt, "qa": qa}[spec.family]
    records, fits = [], []
    for index in range(start_index, start_index + num_samples):
        fit, outputs, answer_prefix = family.generate_sample(spec.params, index, counter=counter, budget=budget,
                                                             seed=seed, task=task, **extra)
        prompt = fit.rendered
        pos = answer_token_position(counter, prompt.input, outputs)
        records.append(make_record(index, prompt, outputs, answer_prefix, fit.tokens, spec.tokens_to_generate,
                                   template_tokens, pos, tokenizer=counter.record))
        fits.append(fit)
    return records, fits


def generate_task(task: str, *, tokenizer=None, max_seq_length: int, num_samples: int, seed: int = 42,
                  morehopqa_path: Optional[Union[str, Path]] = None, chat_template: bool = False,
                  start_index: int = 0, counter: Optional[TokenCounter] = None,
                  reserve_gold: bool = True) -> list[dict]:
    """``num_samples`` RULER lines of ``task`` (indices start_index ...), each with ``needle_spans``."""
    return generate_task_with_fits(task, tokenizer=tokenizer, max_seq_length=max_seq_length, num_samples=num_samples,
                                   seed=seed, morehopqa_path=morehopqa_path, chat_template=chat_template,
                                   start_index=start_index, counter=counter, reserve_gold=reserve_gold)[0]


def dumps_line(record: dict) -> str:
    # Fixed key order (make_record) + fixed separators: identical bytes run to run.
    return json.dumps(record, ensure_ascii=False, separators=(", ", ": ")) + "\n"


def task_path(root: Union[str, Path], task: str, max_seq_length: int) -> Path:
    return Path(root) / str(max_seq_length) / task / "validation.jsonl"


def write_task(root: Union[str, Path], task: str, *, max_seq_length: int, tokenizer=None, num_samples: int = 500,
               seed: int = 42, morehopqa_path: Optional[Union[str, Path]] = None, chat_template: bool = False,
               counter: Optional[TokenCounter] = None, reserve_gold: bool = True) -> Path:
    """Generate and write ``<root>/<max_seq_length>/<task>/validation.jsonl`` atomically; return its path."""
    records = generate_task(task, tokenizer=tokenizer, max_seq_length=max_seq_length, num_samples=num_samples,
                            seed=seed, morehopqa_path=morehopqa_path, chat_template=chat_template, counter=counter,
                            reserve_gold=reserve_gold)
    # readers never see a half-written file
    return atomic_write_text(task_path(root, task, max_seq_length), "".join(dumps_line(r) for r in records))
