"""Temporarily leaving eager attention: passes that need no attention probabilities (the IFR capture in recompute
mode, the deletion passes of faithfulness) run several times faster with a fused kernel on an eager-loaded model."""

from __future__ import annotations

import contextlib
import logging
from typing import Optional

log = logging.getLogger(__name__)


@contextlib.contextmanager
def attention_kernel(model, implementation: Optional[str]):
    """Run an eager-attention ``model`` with ``implementation`` (e.g. "sdpa") inside the block, eager again after.
    A model on any other kernel (sdpa, flash) is left alone, as is everything when ``implementation`` is None or
    unavailable (only speed is at stake)."""
    old = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if implementation is None or old != "eager" or implementation == old \
            or not hasattr(model, "set_attn_implementation"):
        yield
        return
    try:
        model.set_attn_implementation(implementation)
    except (ValueError, ImportError, NotImplementedError) as exc:
        log.debug("keeping attention %s (%s unavailable: %s)", old, implementation, exc)
        yield
        return
    try:
        yield
    finally:
        model.set_attn_implementation(old)
