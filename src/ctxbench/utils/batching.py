"""Batches sized to the accelerator's memory: start at the configured size, halve on CUDA out-of-memory and retry the
same items (the embedder's corpus encoding and the deletion passes of faithfulness use it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import torch

from ctxbench.utils import progress as progress_display

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchRun:
    """What ``run_in_batches`` did: ``size``, the batch size that worked (kept to the end); ``passes``, the calls
    that completed (one forward pass each); ``retries``, the calls abandoned on out-of-memory and rerun smaller."""

    size: int
    passes: int
    retries: int


def run_in_batches(n: int, batch_size: int, run: Callable[[int, int], None], *, what: str,
                   unit: str = "item") -> BatchRun:
    """Call ``run(lo, hi)`` for consecutive slices covering ``range(n)``, at most ``batch_size`` items each; on
    ``torch.cuda.OutOfMemoryError`` halve the size and retry the slice (a failure at size 1 is raised). The size
    that worked is kept for the remaining slices. The progress is shown (``ctxbench.utils.progress``) as ``what``, in
    ``unit``s."""
    batch = max(1, batch_size)
    lo = passes = retries = 0
    with progress_display.bar(n, what, unit) as bar:
        while lo < n:
            hi = min(n, lo + batch)
            try:
                run(lo, hi)
            except torch.cuda.OutOfMemoryError:
                if batch == 1:
                    raise
                batch = max(1, batch // 2)
                retries += 1
                torch.cuda.empty_cache()
                log.warning("%s: out of GPU memory; batch size lowered to %d", what, batch)
                continue
            passes += 1
            bar.update(hi - lo)
            lo = hi
    return BatchRun(batch, passes, retries)

