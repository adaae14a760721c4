"""What a method (or a scorer) costs on one example, counted where the passes run: the cost ledger of run_exp's
result lines (``cost``, ``scoring_cost``; docs/metrics.md#cost-ledger).

Peers state their speed against different baselines (FlashTrace 130x over per-token IFR, AttriBoT 300x over
leave-one-out, AttnTrace 15-20x over TracLLM); counting each method's passes on the same examples makes those claims
comparable whatever the hardware:

- ``forward_calls``: passes through the model's decoder stack (a batch is one pass); ``forward_sequences``: the
  sequences they carried (the batch rows), the unit a leave-one-out method's cost grows in;
- ``backward``: backward passes that reach the model's input embeddings (a gradient method's one per explained token
  and batch of points, AttnLRP's relevance pass);
- ``peak_mib``: on a GPU, the peak memory allocated during the step above what was allocated when it began; on a CPU,
  how far the process's peak resident size grew during the step (``peak_kind`` says which: ``cuda`` or
  ``rss_growth``; the latter is 0 when an earlier step had already reached a higher peak);
- a served model (``models.endpoint_lm``): its requests and prompts stand for calls and sequences.
"""

from __future__ import annotations

import resource
import sys
import weakref
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Iterator, Optional

import torch


@dataclass
class PassCount:
    forward_calls: int = 0
    forward_sequences: int = 0
    backward: int = 0
    peak_mib: Optional[float] = None
    peak_kind: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rss_peak_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform != "darwin" else peak / (1024 * 1024)  # KiB on Linux, bytes on macOS


def _batch_rows(args: tuple, kwargs: dict) -> Optional[torch.Tensor]:
    for key in ("input_ids", "inputs_embeds"):
        if kwargs.get(key) is not None:
            return kwargs[key]
    return args[0] if args and isinstance(args[0], torch.Tensor) else None


@contextmanager
def counting_passes(model) -> Iterator[PassCount]:
    """Count the passes ``model`` runs inside the block (module doc); nothing counted for no model."""
    if model is None:
        yield PassCount()
    elif not isinstance(model, torch.nn.Module):
        with _counting_requests(model) as count:
            yield count
    else:
        with _counting_module(model) as count, _peak_memory(model, count):
            yield count


@contextmanager
def _counting_requests(served) -> Iterator[PassCount]:
    """A served model: its requests and prompts sent during the block."""
    count = PassCount()
    before = (getattr(served, "requests", 0), getattr(served, "prompts", 0))
    try:
        yield count
    finally:
        count.forward_calls = getattr(served, "requests", 0) - before[0]
        count.forward_sequences = getattr(served, "prompts", 0) - before[1]


@contextmanager
def _counting_module(model: torch.nn.Module) -> Iterator[PassCount]:
    count = PassCount()
    hooked: "weakref.WeakSet[torch.Tensor]" = weakref.WeakSet()

    def on_backward(grad):
        count.backward += 1

    def watch(t: Optional[torch.Tensor]) -> None:
        # a tensor with a gradient: each backward pass that reaches it calls the hook once
        if t is not None and t.requires_grad and t not in hooked:
            t.register_hook(on_backward)
            hooked.add(t)

    def before_forward(module, args, kwargs):
        count.forward_calls += 1
        rows = _batch_rows(args, kwargs)
        count.forward_sequences += int(rows.shape[0]) if rows is not None and rows.dim() >= 2 else 1
        watch(kwargs.get("inputs_embeds"))

    # the decoder stack: every pass goes through it, the LM head's and the capture's (IFR runs the base model alone)
    decoder = getattr(model, "base_model", None) or model
    handles = [decoder.register_forward_pre_hook(before_forward, with_kwargs=True)]
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is not None:
        handles.append(embeddings.register_forward_hook(lambda module, args, out: watch(out)))
    try:
        yield count
    finally:
        for h in handles:
            h.remove()


@contextmanager
def _peak_memory(model: torch.nn.Module, count: PassCount) -> Iterator[None]:
    cuda = any(p.is_cuda for p in model.parameters())
    if cuda:
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        start = _rss_peak_mib()
    try:
        yield
    finally:
        if cuda:
            torch.cuda.synchronize()
            count.peak_mib, count.peak_kind = (torch.cuda.max_memory_allocated() - start) / 2 ** 20, "cuda"
        else:
            count.peak_mib, count.peak_kind = _rss_peak_mib() - start, "rss_growth"
