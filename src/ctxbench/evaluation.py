"""One example through the attribution stage: model input, spans, each method's attribution, views, scores.

The run stage calls ``evaluate_example`` per example; every scorer reads the same attribution, so several modes in one
run cost one attribution per example and method.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterator, Optional

import numpy as np

from ctxbench.attribution import AttributionResult, Attributor, views as token_views
from ctxbench.datasets.sentences import split_sentences
from ctxbench.core.errors import DataError, ExampleRefused
from ctxbench.example import CachedExample
from ctxbench.attribution.cost import counting_passes
from ctxbench.metrics.recovery import gold_token_indices
from ctxbench.metrics.scorer import Scorer
from ctxbench.prompts.formats import ModelInput, build_model_input

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
    """Sink and thinking spans in this tokenizer's target-token coordinates, and where they came from
    (``CachedExample.spans_for``): cached spans are kept when this tokenizer made them; spans of another tokenizer, or
    of an unrecorded one when the row has the answer's characters (a cache made elsewhere), are redone from
    ``metadata.sink_char_span`` or the last occurrence of ``metadata.boxed_answer`` in the target. An example whose
    answer cannot be located is refused."""
    try:
        return example.spans_for(tokenizer)
    except DataError as exc:
        raise ExampleRefused(f"example {example.example_id}: {exc}") from None


def check_targets(examples: list[CachedExample], source) -> None:
    """Refuse, before any model loads, data with nothing to explain: no example at all (e.g. a sampled cache the
    sampling stage kept nothing in), or no example with a target (raw MoreHopQA rows). ``source``: the LoadedSource."""
    if not examples:
        hint = ("; the sampling stage kept no example (a larger generator, or more rows with max_rows, may keep some)"
                if source.kind == "cache" else "")
        raise ExampleRefused(f"dataset {source.name}: no examples in {source.path}{hint}")
    if all(e.target is None for e in examples):
        raise ExampleRefused(f"dataset {source.name}: no example has a target to explain ({source.path}): raw "
                             f"{source.kind} rows need the sampling stage (sample_and_filter) first, whose cache "
                             f"<paths.samples_dir>/{source.name}.jsonl run_exp reads")


def prepare_example(example: CachedExample, tokenizer, prompt_format: str) -> PreparedExample:
    if example.target is None:
        raise ExampleRefused(f"example {example.example_id} has no target to explain: raw MoreHopQA rows need the "
                             f"sampling stage (sample_and_filter) first")
    mi = build_model_input(tokenizer, example.prompt, example.target, prompt_format)
    question = example.metadata.get("question_char_span")
    if question is not None:  # the question is no source of ContextCite's (the data marks it: MoreHopQA)
        mi.query_tokens = gold_token_indices(mi.prompt_offsets, [question])
    sink, think, origin = example_spans(example, tokenizer)
    return PreparedExample(example, mi, sink, think, notes={"spans": origin})


def view_weights(result: AttributionResult, sink_span, names) -> dict[str, np.ndarray]:
    """Prompt weights (length P) of each view."""
    return {v: token_views.view(v, result.matrix, result.P, sink_span)[:result.P] for v in names}


def evaluate_example(model, tokenizer, prepared: PreparedExample, attributors: dict[str, Attributor],
                     scorers: dict[str, Scorer], views: tuple[str, ...],
                     on_step: Optional[Callable[[str, str], None]] = None
                     ) -> Iterator[tuple[str, AttributionResult, dict[str, Any]]]:
    """Attribute with each method and score it with every scorer, yielding ``(method, result, record)`` as each
    method finishes (so that a caller can write it before the next, possibly long, method starts). ``on_step(method,
    step)`` is called as each step starts (``attribution``, then each scorer's mode): a progress display."""
    mi = prepared.model_input
    # per-token methods explain only the rows the views read (Table 1's row view: the answer span's)
    rows = token_views.rows_read(views, mi.G, prepared.sink_span)
    step = on_step or (lambda method, what: None)
    for name, attributor in attributors.items():
        step(name, "attribution")
        with counting_passes(model) as cost:
            result = attributor.attribute(model, tokenizer, mi, prepared.sink_span, prepared.thinking_span, rows)
        weights = view_weights(result, prepared.sink_span, views)
        record = {"example_id": prepared.example.example_id, "method": name, "P": mi.P, "G": mi.G,
                  "sink_span": prepared.sink_span, "thinking_span": prepared.thinking_span,
                  "spans": prepared.notes.get("spans"), "attribution_s": float(result.timings.get("total", 0.0)),
                  "attribution_timings": {k: float(v) for k, v in result.timings.items()},
                  "attribution_info": result.info, "cost": cost.to_dict()}
        timings, costs = {}, {}
        for mode, scorer in scorers.items():
            step(name, mode)
            t0 = time.perf_counter()
            with counting_passes(model) as scoring:
                record.update(scorer.score(model, tokenizer, prepared, result, weights))
            timings[mode] = time.perf_counter() - t0
            costs[mode] = scoring.to_dict()
        record["scoring_timings"] = timings
        record["scoring_cost"] = costs
        yield name, result, record
