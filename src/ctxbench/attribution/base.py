"""Attributor interface, result type and the helpers every method shares (a method is reached by the `_target_` of
its `conf/attribution/<name>.yaml`; there is no registry to add it to).

Coordinates: the model input has T tokens; ``input_ids[gen_start:]`` are the G generated tokens; ``prompt_positions``
(P,) locate the user-prompt tokens. Attribution columns are the P prompt tokens then the G generated tokens
(chat-template tokens dropped). Spans are closed intervals ``(start, end)`` in generated-token coordinates.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, ClassVar, Optional, Sequence

import numpy as np
import torch
from ctxbench.core.part import Part

if TYPE_CHECKING:
    from ctxbench.attribution.memory import ModelShape, Need

Span = Optional[Sequence[int]]


@dataclass
class AttributionResult:
    """``matrix``: float32 (G, P+G), NaN rows where the method wrote nothing.

    ``hop_vectors``: (K+1, P+G) per-hop token vectors of multi-hop methods (hop 0 first; for ``_both`` methods with stop
    tokens zeroed), else None. ``rho``: the CoT-mass ratios rho_0..rho_K. ``prompt_stop_mask``: bool (P,), True for
    prompt stop tokens (only ``_both`` methods set it: faithfulness ranks only the other tokens). ``observation_mask``:
    (P+G,) the mask m of docs/attribution.md, "Multi-hop IFR". ``timings``: seconds (``capture``, ``attribution``,
    ``total``). ``info``: facts a method reports per example (e.g. ContextCite's ablation count and its R^2),
    JSON-ready; the run stage records them as ``attribution_info``. ``source_scores``: how the method scores the
    prompt's sources (sentences) for the source-level metrics (LDS, top-k drop; ``metrics.source_ablation``): called
    with the sources, each its prompt-token indices (0..P-1), it returns one score per source. None: a source's score
    is the sum of the view's token weights over its tokens, which favours long sentences; a control whose score is not
    a sum of per-token scores (``random``: one draw per source; ``length``) says so here (docs/metrics.md, "Controls").
    """

    matrix: np.ndarray
    method: str
    P: int
    G: int
    hop_vectors: Optional[np.ndarray] = None
    rho: Optional[list] = None
    prompt_stop_mask: Optional[np.ndarray] = None
    gen_stop_mask: Optional[np.ndarray] = None
    observation_mask: Optional[np.ndarray] = None
    rows_written: Optional[np.ndarray] = None  # generated-token indices whose row is filled
    timings: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    source_scores: Optional[Callable[[list[np.ndarray]], np.ndarray]] = None

    @property
    def prompt_matrix(self) -> np.ndarray:
        return self.matrix[:, :self.P]


@dataclass
class Attributor(Part, ABC):
    """Builds a G x (P+G) attribution matrix for one model input.

    Subclasses are dataclasses: their typed fields are the method's parameters (the config node of
    ``conf/attribution/<name>.yaml`` holds ``_target_`` plus these keywords), with their bounds and choices declared
    on the fields (``ctxbench.core.part.param``), so a bad setting fails when the method is built, before any model is
    loaded. ``name``: the method's option name, which results and reports carry.
    """

    name: ClassVar[str] = ""
    needs_model: ClassVar[bool] = True  # False: the method reads token ids only (controls); the model may be None
    # True: the method asks the model for log-probabilities only, so it runs on a served model too (model=openai)
    log_probs_only: ClassVar[bool] = False
    # the prompt tokens the faithfulness scorer deletes for this method when it scores it under its own set: "all", or
    # "nonstop" for a method whose result carries ``prompt_stop_mask`` (FlashTrace); read for result lines written
    # before the scorer recorded it
    deletion_set: ClassVar[str] = "all"

    def attribute(self, model, tokenizer, model_input, sink_span: Span = None, thinking_span: Span = None,
                  rows: Optional[Sequence[int]] = None) -> AttributionResult:
        """``rows``: the generated-token rows the caller will read (None: all). Methods that explain each generated
        token separately (their cost grows with the rows) compute only these and leave the others NaN; the others
        ignore it."""
        t0 = time.perf_counter()
        ctx = InputContext.from_model_input(model, model_input)
        ctx.rows = check_rows(rows, ctx.G)
        sink = check_span(sink_span, ctx.G, "sink_span")
        think = check_span(thinking_span, ctx.G, "thinking_span")
        timings: dict = {}
        res = self._attribute(model, tokenizer, ctx, sink, think, timings)
        timings["total"] = time.perf_counter() - t0
        res.timings = timings
        res.params = self.settings()
        return res

    @abstractmethod
    def _attribute(self, model, tokenizer, ctx: "InputContext", sink, think, timings: dict) -> AttributionResult:
        ...

    def memory_need(self, shape: "ModelShape", T: int, G: int) -> Optional["Need"]:
        """Estimated memory this method adds over the loaded model on an input of T tokens, G of them generated
        (``ctxbench.attribution.memory``); None: no estimate, never refused up front."""
        return None


@dataclass
class InputContext:
    input_ids: torch.Tensor  # (T,) on the model's device
    prompt_positions: torch.Tensor  # (P,) on the model's device
    gen_start: int
    rows: Optional[np.ndarray] = None  # generated-token rows the caller reads (None: all), ascending
    query_tokens: Optional[np.ndarray] = None  # prompt-token indices of the question the data marks (ModelInput's)

    @classmethod
    def from_model_input(cls, model, mi) -> "InputContext":
        # None: a control's run; a served model (models.endpoint_lm) has the CPU's
        dev = torch.device("cpu") if model is None else \
            getattr(model, "device", None) or next(model.parameters()).device
        ids = torch.as_tensor(mi.input_ids, dtype=torch.long).reshape(-1).to(dev)
        pp = torch.as_tensor(mi.prompt_positions, dtype=torch.long).reshape(-1).to(dev)
        gs = int(mi.gen_start)
        if not 0 < gs <= ids.numel():
            raise ValueError(f"gen_start={gs} outside the input of {ids.numel()} tokens")
        if pp.numel() and (int(pp.max()) >= gs or int(pp.min()) < 0):
            raise ValueError("prompt_positions must lie before gen_start")
        query = getattr(mi, "query_tokens", None)
        return cls(ids, pp, gs, query_tokens=None if query is None else np.asarray(query, dtype=np.int64))

    @property
    def T(self) -> int:
        return int(self.input_ids.numel())

    @property
    def P(self) -> int:
        return int(self.prompt_positions.numel())

    @property
    def G(self) -> int:
        return self.T - self.gen_start

    @property
    def columns(self) -> torch.Tensor:
        """Absolute positions of the P+G attribution columns."""
        gen = torch.arange(self.gen_start, self.T, device=self.input_ids.device)
        return torch.cat([self.prompt_positions, gen])

    def to_columns(self, v: torch.Tensor) -> torch.Tensor:
        """Project a full-sequence vector (..., T) onto the columns (..., P+G)."""
        return v[..., self.columns]

    def row_indices(self) -> np.ndarray:
        """The generated-token rows to compute (``rows``, or all G)."""
        return np.arange(self.G) if self.rows is None else self.rows

    def gen_rows(self, span) -> torch.Tensor:
        """Absolute positions of a closed generated-token span."""
        return torch.arange(self.gen_start + span[0], self.gen_start + span[1] + 1, device=self.input_ids.device)


def check_span(span: Span, G: int, name: str):
    if span is None:
        return None
    s, e = int(span[0]), int(span[1])
    if not 0 <= s <= e < G:
        raise ValueError(f"{name}={list(span)} is not a closed interval inside the {G} generated tokens")
    return (s, e)


def check_rows(rows: Optional[Sequence[int]], G: int) -> Optional[np.ndarray]:
    """Requested rows as an ascending array of distinct indices in [0, G); None stays None (all rows)."""
    if rows is None:
        return None
    out = np.unique(np.asarray(rows, dtype=np.int64).reshape(-1))
    if out.size == 0 or out[0] < 0 or out[-1] >= G:
        raise ValueError(f"rows must be generated-token indices in [0, {G}), got {list(np.asarray(rows).ravel())}")
    return out


def empty_matrix(G: int, P: int) -> np.ndarray:
    return np.full((G, P + G), np.nan, dtype=np.float32)


def causal_column_mask(P: int, G: int) -> np.ndarray:
    """(G, P+G) True where generated token t may be attributed: every prompt token and generated tokens before t."""
    m = np.zeros((G, P + G), dtype=bool)
    m[:, :P] = True
    m[:, P:] = np.tri(G, G, -1, dtype=bool)
    return m


# --- stop tokens (the "_both" methods) ---------------------------------------------------------------------------

STOP_STRINGS = (",", ".")


def is_stop_text(text: str) -> bool:
    """A stop token strips to "," or "." or to nothing (whitespace-only)."""
    t = text.strip()
    return t == "" or t in STOP_STRINGS


def stop_mask(tokenizer, ids) -> np.ndarray:
    # each distinct id decoded once: a long context repeats few tokens many times
    uniq, inverse = np.unique(torch.as_tensor(ids).reshape(-1).cpu().numpy(), return_inverse=True)
    flags = np.array([is_stop_text(tokenizer.decode([int(i)])) for i in uniq], dtype=bool)
    return flags[inverse.reshape(-1)]
