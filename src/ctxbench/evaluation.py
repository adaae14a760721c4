"""One example through the attribution stage: model input, spans, each method's attribution, views, scores.

The run stage calls ``evaluate_example`` per example; every scorer reads the same attribution, so several modes in one
run cost one attribution per example and method.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterator, Optional

import numpy as np

from ctxbench.attribution import AttributionResult, Attributor, views as token_views
from ctxbench.datasets.sentences import split_sentences
from ctxbench.errors import ExampleRefused
from ctxbench.example import CachedExample
from ctxbench.metrics.recovery import gold_token_indices
from ctxbench.metrics.scorer import Scorer
from ctxbench.prompts.formats import ModelInput, build_model_input
from ctxbench.spans import answer_token_spans, tokenizer_name

VIEW_NAMES = ("seq", "row", "rec")


@dataclass
class PreparedExample:
    """One example ready for attribution: the model input and its spans; what scorers derive from the example's
    evidence is computed on first use and shared by every method and mode."""

    example: CachedExample
    model_input: ModelInput
    sink_span: Optional[list]
    thinking_span: Optional[list]
    notes: dict = field(default_factory=dict)

    @cached_property
    def evidence_tokens(self) -> Optional[list[int]]:
        """Prompt-token indices inside the evidence spans (``metadata.needle_spans``), None without spans.

        Needle spans index the RULER ``input``; the prompt is input + answer_prefix, and the model input's prompt
        offsets are in prompt characters whatever format was wrapped around it."""
        needles = self.example.metadata.get("needle_spans")
        if needles is None:
            return None
        return gold_token_indices(self.model_input.prompt_offsets, [n["span"] for n in needles])

    @cached_property
    def sentences(self) -> list:
        """The prompt's sentence spans."""
        return split_sentences(self.example.prompt)


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


def prepare_example(example: CachedExample, tokenizer, prompt_format: str) -> PreparedExample:
    if example.target is None:
        raise ExampleRefused(f"example {example.example_id} has no target to explain: raw MoreHopQA rows need the "
                             f"sampling stage (sample_and_filter) first")
    mi = build_model_input(tokenizer, example.prompt, example.target, prompt_format)
    sink, think, origin = example_spans(example, tokenizer)
    return PreparedExample(example, mi, sink, think, notes={"spans": origin})


def view_weights(result: AttributionResult, sink_span, names) -> dict[str, np.ndarray]:
    """Prompt weights (length P) of each view."""
    return {v: token_views.view(v, result.matrix, result.P, sink_span)[:result.P] for v in names}


def evaluate_example(model, tokenizer, prepared: PreparedExample, attributors: dict[str, Attributor],
                     scorers: dict[str, Scorer], views: tuple[str, ...]
                     ) -> Iterator[tuple[str, AttributionResult, dict[str, Any]]]:
    """Attribute with each method and score it with every scorer, yielding ``(method, result, record)`` as each
    method finishes (so that a caller can write it before the next, possibly long, method starts)."""
    mi = prepared.model_input
    # per-token methods explain only the rows the views read (Table 1's row view: the answer span's)
    rows = token_views.rows_read(views, mi.G, prepared.sink_span)
    for name, attributor in attributors.items():
        result = attributor.attribute(model, tokenizer, mi, prepared.sink_span, prepared.thinking_span, rows)
        weights = view_weights(result, prepared.sink_span, views)
        record = {"example_id": prepared.example.example_id, "method": name, "P": mi.P, "G": mi.G,
                  "sink_span": prepared.sink_span, "thinking_span": prepared.thinking_span,
                  "spans": prepared.notes.get("spans"), "attribution_s": float(result.timings.get("total", 0.0)),
                  "attribution_timings": {k: float(v) for k, v in result.timings.items()},
                  "attribution_info": result.info}
        timings = {}
        for mode, scorer in scorers.items():
            t0 = time.perf_counter()
            record.update(scorer.score(model, tokenizer, prepared, result, weights))
            timings[mode] = time.perf_counter() - t0
        record["scoring_timings"] = timings
        yield name, result, record
