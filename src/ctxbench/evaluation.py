"""One example through the attribution stage: model input, spans, each method's attribution, views, metrics.

The run stage calls ``evaluate_example`` per example; every selected mode reads the same attribution, so several
modes in one run cost one attribution per example and method.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ctxbench.attribution import AttributionResult, Attributor, views as token_views
from ctxbench.datasets.sentences import split_sentences
from ctxbench.example import CachedExample
from ctxbench.metrics.coverage import coverage
from ctxbench.metrics.faithfulness import faithfulness_for_views
from ctxbench.metrics.recovery import gold_token_indices, recall_at_fraction
from ctxbench.prompts.formats import ModelInput, build_model_input
from ctxbench.spans import answer_token_spans, tokenizer_name

MODES = ("faithfulness", "recovery", "coverage")
VIEW_NAMES = ("seq", "row", "rec")


@dataclass
class ModeSettings:
    """What to score. ``faithfulness``/``recovery``/``coverage`` are None when the mode is off."""

    views: tuple = VIEW_NAMES
    faithfulness: Optional[dict] = None  # {"steps": 20, "batch_size": 8}
    recovery: Optional[dict] = None  # {"fraction": 0.1}
    coverage: Optional[dict] = None  # {}

    def active(self) -> list[str]:
        return [m for m in MODES if getattr(self, m) is not None]


@dataclass
class PreparedExample:
    example: CachedExample
    model_input: ModelInput
    sink_span: Optional[list]
    thinking_span: Optional[list]
    gold_tokens: Optional[list] = None  # recovery: prompt-token indices inside evidence spans
    sentences: Optional[list] = None  # coverage: the prompt's sentence spans, split once for all methods
    notes: dict = field(default_factory=dict)


class ExampleRefused(ValueError):
    """The example (or the whole dataset) cannot be scored as configured; the message says why."""


def example_spans(example: CachedExample, tokenizer) -> tuple[Optional[list], Optional[list], str]:
    """Sink and thinking spans in this tokenizer's target-token coordinates, and where they came from.

    Cached spans are used when they were made by the same tokenizer; otherwise they are recomputed from the answer's
    character span (``metadata.sink_char_span``, or the last occurrence of ``metadata.boxed_answer`` in the target).
    """
    md = example.metadata
    same = md.get("span_tokenizer") in (None, tokenizer_name(tokenizer))
    sink = example.sink_span if example.sink_span is not None else example.indices_to_explain
    if sink is not None and same:
        return sink, example.thinking_span, "cached"
    char_span = md.get("sink_char_span")
    if char_span is None and md.get("boxed_answer"):
        start = example.target.rfind(md["boxed_answer"])
        if start >= 0:
            char_span = [start, start + len(md["boxed_answer"])]
    if char_span is None:
        if sink is not None:
            raise ExampleRefused(f"example {example.example_id}: spans were made by {md.get('span_tokenizer')!r}, "
                                 f"not {tokenizer_name(tokenizer)!r}, and no character span is recorded to redo them")
        return None, None, "whole generation"
    new_sink, new_think, _ = answer_token_spans(tokenizer, example.target, int(char_span[0]), int(char_span[1]))
    if new_sink is None:
        raise ExampleRefused(f"example {example.example_id}: no token of the target overlaps the answer")
    # A gold RULER target has no chain of thought: keep its thinking span null.
    think = new_think if example.thinking_span is not None else None
    return new_sink, think, "recomputed"


def prepare_example(example: CachedExample, tokenizer, prompt_format: str, *, need_gold: bool) -> PreparedExample:
    if example.target is None:
        raise ExampleRefused(f"example {example.example_id} has no target to explain: raw MoreHopQA rows need the "
                             f"sampling stage (sample_and_filter) first")
    mi = build_model_input(tokenizer, example.prompt, example.target, prompt_format)
    sink, think, origin = example_spans(example, tokenizer)
    prepared = PreparedExample(example, mi, sink, think, notes={"spans": origin})
    if need_gold:
        needles = example.metadata.get("needle_spans")
        if needles is not None:
            # needle spans index `input`; the prompt is input + answer_prefix, and the prompt offsets of the model
            # input are already in prompt characters, whatever the format wrapped around it.
            prepared.gold_tokens = gold_token_indices(mi.prompt_offsets, [n["span"] for n in needles])
    return prepared


def view_weights(result: AttributionResult, sink_span, names) -> dict[str, np.ndarray]:
    """Prompt weights (length P) of each view."""
    return {v: token_views.view(v, result.matrix, result.P, sink_span)[:result.P] for v in names}


def score(model, tokenizer, prepared: PreparedExample, result: AttributionResult, modes: ModeSettings
          ) -> dict[str, Any]:
    """The metrics of every active mode for one attribution; also the time each took."""
    weights = view_weights(result, prepared.sink_span, modes.views)
    out: dict[str, Any] = {"timings": {}}
    rank_mask = None if result.prompt_stop_mask is None else ~np.asarray(result.prompt_stop_mask, dtype=bool)
    if modes.faithfulness is not None:
        t0 = time.perf_counter()
        stats: dict = {}
        out["faithfulness"] = faithfulness_for_views(
            model, prepared.model_input, weights, pad_id=tokenizer.eos_token_id, rank_mask=rank_mask,
            batch_size=int(modes.faithfulness.get("batch_size", 8)),
            max_steps=int(modes.faithfulness.get("steps", 20)), stats=stats)
        out["faithfulness_stats"] = stats
        out["timings"]["faithfulness"] = time.perf_counter() - t0
    if modes.recovery is not None:
        gold = prepared.gold_tokens
        fraction = float(modes.recovery.get("fraction", 0.1))
        rec = {v: recall_at_fraction(w, gold, fraction) for v, w in weights.items()} if gold else None
        out["recovery"] = rec
        out["recovery_skipped"] = None if rec else "no prompt token overlaps the evidence spans"
        out["gold_tokens"] = len(gold or [])
    if modes.coverage is not None:
        if prepared.sentences is None:
            prepared.sentences = split_sentences(prepared.example.prompt)
        gold_sentences = prepared.example.attr_mask_indices or []
        cov = {v: coverage(w, prepared.model_input.prompt_offsets, prepared.sentences, gold_sentences)
               for v, w in weights.items()}
        out["coverage"] = cov if any(c is not None for c in cov.values()) else None
    return out


def evaluate_example(model, tokenizer, prepared: PreparedExample, attributors: dict[str, Attributor],
                     modes: ModeSettings) -> dict[str, tuple[AttributionResult, dict[str, Any]]]:
    """Attribute with each method and score it: ``{method: (result, record)}``."""
    out = {}
    mi = prepared.model_input
    for name, attributor in attributors.items():
        result = attributor.attribute(model, tokenizer, mi, prepared.sink_span, prepared.thinking_span)
        scored = score(model, tokenizer, prepared, result, modes)
        record = {"example_id": prepared.example.example_id, "method": name, "P": mi.P, "G": mi.G,
                  "sink_span": prepared.sink_span, "thinking_span": prepared.thinking_span,
                  "spans": prepared.notes.get("spans"), "attribution_s": float(result.timings.get("total", 0.0)),
                  "attribution_timings": {k: float(v) for k, v in result.timings.items()},
                  **{k: v for k, v in scored.items() if k != "timings"},
                  "scoring_timings": scored["timings"]}
        out[name] = (result, record)
    return out


def check_modes_supported(examples: list[CachedExample], modes: ModeSettings, dataset: str) -> None:
    """Refuse a mode the data cannot support, before any work is done."""
    if modes.recovery is not None and not any(e.metadata.get("needle_spans") for e in examples):
        raise ExampleRefused(f"mode recovery needs evidence spans (metadata.needle_spans, RULER data from "
                             f"prepare_data); dataset {dataset!r} has none")
    if modes.coverage is not None and not any(e.attr_mask_indices for e in examples):
        raise ExampleRefused(f"mode coverage needs gold sentence indices (attr_mask_indices); dataset {dataset!r} has none")
