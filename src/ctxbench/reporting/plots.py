"""Per-example HTML heat maps over the prompt tokens (the faithfulness mode's deletion-curve figure is its own:
``ctxbench.metrics.deletion_plots``)."""

from __future__ import annotations

import html
from typing import Iterable, Sequence

import numpy as np


def heatmap_html(tokens: Sequence[str], weights: Sequence[float], *, title: str, gold: Iterable[int] = (),
                 generated: Sequence[str] = ()) -> str:
    """Prompt tokens shaded by attribution weight (clamped at 0, scaled to the maximum); gold tokens underlined."""
    w = np.clip(np.nan_to_num(np.asarray(weights, dtype=np.float64)), 0, None)
    top = w.max() if w.size and w.max() > 0 else 1.0
    gold = set(gold)
    spans = []
    for i, (tok, x) in enumerate(zip(tokens, w)):
        alpha = x / top
        style = f"background: rgba(220, 38, 38, {alpha:.3f});"
        if i in gold:
            style += " text-decoration: underline 2px #2563eb;"
        spans.append(f'<span title="{i}: {x:.4g}" style="{style}">{html.escape(tok)}</span>')
    gen = html.escape("".join(generated))
    return ("<!doctype html><html><head><meta charset='utf-8'><title>{t}</title><style>"
            "body{{font-family:sans-serif;max-width:60em;margin:2em auto}}"
            ".ctx{{white-space:pre-wrap;font-family:monospace;line-height:1.6}}</style></head><body>"
            "<h3>{t}</h3><p>Shading: attribution weight of each prompt token (hover for the value); "
            "underlined: gold evidence tokens.</p><div class='ctx'>{body}</div>"
            "<h4>Explained generation</h4><div class='ctx'>{gen}</div></body></html>").format(
        t=html.escape(title), body="".join(spans), gen=gen)
