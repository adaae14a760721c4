"""Per-example HTML heat maps over the prompt tokens (the faithfulness mode's deletion-curve figure is its own:
``ctxbench.reporting.curves``)."""

from __future__ import annotations

from typing import Iterable, Sequence

from ctxbench.reporting import heatmap


def heatmap_html(tokens: Sequence[str], weights: Sequence[float], *, title: str, gold: Iterable[int] = (),
                 generated: Sequence[str] = ()) -> str:
    """One method's heat-map page (``heatmaps/<method>/<example>.html``): the prompt tokens shaded by attribution
    weight with report.html's renderer and rule (``reporting.heatmap``: red positive, blue negative, scaled to the
    largest |weight|), gold tokens underlined, the weight on hover."""
    return heatmap.method_page(tokens, weights, title=title, gold=gold, generated=generated)
