"""The one heat-map renderer: how a token's attribution weight becomes its shade, and the strip of shaded tokens that
both heat-map pages draw (the per-method pages ``heatmaps/<method>/<example>.html`` through ``method_page``, and the
panels of ``report.html``, ``reporting.html``), with the ``strip`` macro of ``resources/templates/macros.html.j2``.

The shading rule (docs/report.md, "Heat maps"): a weight is shown as a signed percentage of the largest |weight| of
the vector it belongs to (``shades``), red for a positive weight, blue for a negative one, its opacity the
percentage; a weight of 0 is not shaded. A negative weight is therefore never shown as 0, and the positive shades are
scaled by the largest absolute weight, not the largest positive one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from ctxbench.reporting.render import render_page

POSITIVE = (220, 38, 38)  # red
NEGATIVE = (37, 99, 235)  # blue
TOP_K = 10  # tokens outlined per heat map of report.html
MAX_TOKENS = 400  # prompt (and generation) tokens shown per example of report.html; longer ones are cut to windows
WINDOW = 8  # tokens kept on each side of a gold or top token when cutting


def shades(w) -> np.ndarray:
    """Signed whole percentages of the largest |weight| (NaN as 0; all 0 when every weight is 0)."""
    w = np.nan_to_num(np.asarray(w, dtype=np.float64))
    top = np.abs(w).max() if w.size else 0.0
    return np.rint(100 * w / top).astype(int) if top > 0 else np.zeros(w.shape, dtype=int)


def shade_css(a: int) -> str:
    """The CSS colour of a shade (``shades``): red at a/100 opacity for a > 0, blue at -a/100 for a < 0, "" for 0."""
    if a == 0:
        return ""
    r, g, b = POSITIVE if a > 0 else NEGATIVE
    return f"rgba({r},{g},{b},{abs(a) / 100:.2f})"


def colours() -> dict[str, str]:
    """The two colours as ``"r,g,b"``, for the page's script that switches a panel's shades."""
    return {"positive": ",".join(map(str, POSITIVE)), "negative": ",".join(map(str, NEGATIVE))}


def top_tokens(w, k: int = TOP_K) -> list[int]:
    """Indices of the k largest positive weights, largest first (ties: earlier token first)."""
    w = np.nan_to_num(np.asarray(w, dtype=np.float64))
    order = np.argsort(-w, kind="stable")[:k]
    return [int(i) for i in order if w[i] > 0]


def shown_positions(n: int, priority: Sequence[int], max_tokens: int = MAX_TOKENS, window: int = WINDOW) -> list[int]:
    """All n positions if they fit; else windows of +-window around the priority positions (gold, then top tokens by
    rank), narrowed until at most max_tokens remain, and at width 0 the first max_tokens priority positions."""
    if n <= max_tokens:
        return list(range(n))
    keep = list(dict.fromkeys(i for i in priority if 0 <= i < n))
    for w in range(window, -1, -1):
        shown = {j for i in keep for j in range(max(0, i - w), min(n, i + w + 1))}
        if len(shown) <= max_tokens:
            return sorted(shown)
    return sorted(keep[:max_tokens])


@dataclass(frozen=True)
class Item:
    """A token of a strip (``i``: its position, ``classes``: ``tok`` and its marks, ``shade``: its CSS colour,
    ``title``: a tooltip), or, with ``gap`` > 0, a run of ``gap`` tokens left out."""

    i: int = -1
    text: str = ""
    classes: str = "tok"
    shade: str = ""
    title: str = ""
    gap: int = 0


def strip(tokens: Sequence[str], shown: Sequence[int], alphas: Sequence[int],
          marks: Optional[Mapping[int, Iterable[str]]] = None,
          titles: Optional[Mapping[int, str]] = None) -> list[Item]:
    """The shown tokens (positions ``shown``, ascending) with their shades (``alphas``, one per shown token, from
    ``shades``), their marks (``gold``, ``top``, ``sink``: CSS classes) and tooltips, and a gap item for each run of
    tokens left out."""
    marks, titles = marks or {}, titles or {}
    items, prev = [], -1
    for i, a in zip(shown, alphas):
        if i > prev + 1:
            items.append(Item(gap=i - prev - 1))
        items.append(Item(i, tokens[i], " ".join(["tok", *marks.get(i, ())]), shade_css(int(a)), titles.get(i, "")))
        prev = i
    if prev < len(tokens) - 1:
        items.append(Item(gap=len(tokens) - 1 - prev))
    return items


def method_page(tokens: Sequence[str], weights: Sequence[float], *, title: str, gold: Iterable[int] = (),
                generated: Sequence[str] = ()) -> str:
    """One method's heat map of one example (``heatmaps/<method>/<example>.html``): every prompt token shaded by
    ``shades`` (the same rule and strip as report.html), gold tokens underlined, the weight on hover."""
    w = np.nan_to_num(np.asarray(weights, dtype=np.float64))
    gold = set(gold)
    items = strip(tokens, range(len(tokens)), shades(w).tolist(), {i: ["gold"] for i in gold},
                  {i: f"{i}: {x:.4g}" for i, x in enumerate(w)})
    return render_page("heatmap.html.j2", title=title, items=items, generated="".join(generated))
