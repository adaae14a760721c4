"""Figures of a run: the mean deletion curve per view (PNG) and per-example HTML heat maps over the prompt tokens."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ctxbench.metrics.faithfulness import normalized_curve
from ctxbench.metrics.scorer import VIEW_LABELS

GRID = np.linspace(0.0, 1.0, 21)


def _on_grid(curve: Sequence[float]) -> np.ndarray:
    """A normalised deletion curve (K + 1 points, K = min(20, P)) resampled on 21 fractions of deleted blocks."""
    n = normalized_curve(np.asarray(curve, dtype=np.float64))
    return np.interp(GRID, np.linspace(0.0, 1.0, len(n)), n)


def deletion_curve_plots(records: Iterable[dict[str, Any]], views: list[str], output_dir: Path,
                         field: str = "faithfulness") -> list[Path]:
    """``deletion_curve_<view>.png``: per method, the mean normalised score after deleting the top-ranked blocks
    (the ``curve`` of each view in the records' ``field``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves: dict[str, dict[str, list[np.ndarray]]] = {v: {} for v in views}
    for r in records:
        for v, f in (r.get(field) or {}).items():
            if v in curves and f.get("curve"):
                curves[v].setdefault(r["method"], []).append(_on_grid(f["curve"]))
    written = []
    for v in views:
        if not curves[v]:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.6), dpi=120)
        for method, cs in sorted(curves[v].items()):
            ax.plot(GRID, np.mean(cs, axis=0), marker="o", markersize=2.5, label=f"{method} (n={len(cs)})")
        ax.set_xlabel("fraction of deletion steps (most attributed first)")
        ax.set_ylabel("normalised log p(target)")
        ax.set_title(f"Deletion curve, {VIEW_LABELS[v]} view (lower area = more faithful)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = Path(output_dir) / f"deletion_curve_{v}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


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
