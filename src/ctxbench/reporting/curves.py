"""The figures and step series of the modes' curves: the mean normalised deletion curve of the faithfulness mode per
view and method (``deletion_curve_<view>.png`` in a job folder, ``<task>.deletion_curve_<view>.png`` in a report),
and the same curves as step series for the experiment trackers. The curves' maths (normalisation, RISE, MAS) is in
``metrics.faithfulness``; this module only resamples, averages and draws them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ctxbench.metrics.faithfulness import FaithfulnessScorer, normalized_curve
from ctxbench.metrics.scorer import VIEW_LABELS, Scorer
from ctxbench.utils.files import safe_filename, save_png


def mode_plots(scorers: Mapping[str, Scorer], records: list[dict], views: list[str], output_dir) -> list[Path]:
    """The figures of a job's modes in its folder: the deletion curves of each faithfulness mode."""
    return [p for s in scorers.values() if isinstance(s, FaithfulnessScorer)
            for p in deletion_curve_plots(records, views, output_dir, field=s.name)]


def step_series(scorers: Mapping[str, Scorer], records: list[dict], views: list[str]) -> dict[str, list[float]]:
    """``<method>/<mode>/<view>/deletion_curve`` -> the mean curve by step, of each faithfulness mode (what the
    trackers log step by step)."""
    out: dict[str, list[float]] = {}
    for s in scorers.values():
        if isinstance(s, FaithfulnessScorer):
            curves = mean_deletion_curves(records, views, s.name)
            out.update({f"{method}/{s.name}/{v}/deletion_curve": [float(x) for x in mean]
                        for v, by in curves.items() for method, (mean, _) in by.items()})
    return out


GRID = np.linspace(0.0, 1.0, 21)  # the fractions of deleted blocks every curve is resampled on


def _on_grid(curve: Sequence[float]) -> np.ndarray:
    """A normalised deletion curve (K + 1 points, K = min(20, P)) resampled on 21 fractions of deleted blocks."""
    n = normalized_curve(np.asarray(curve, dtype=np.float64))
    return np.interp(GRID, np.linspace(0.0, 1.0, len(n)), n)


def mean_deletion_curves(records: Iterable[dict[str, Any]], views: list[str],
                         field: str = "faithfulness") -> dict[str, dict[str, tuple[np.ndarray, int]]]:
    """``{view: {method: (mean normalised curve on GRID, examples)}}`` from the ``curve`` of each view in the records'
    ``field``: what the deletion-curve figure draws and the trackers log step by step."""
    curves: dict[str, dict[str, list[np.ndarray]]] = {v: {} for v in views}
    for r in records:
        for v, f in (r.get(field) or {}).items():
            if v in curves and f.get("curve"):
                curves[v].setdefault(r["method"], []).append(_on_grid(f["curve"]))
    return {v: {m: (np.mean(cs, axis=0), len(cs)) for m, cs in sorted(by.items())} for v, by in curves.items()}


def deletion_curve_plots(records: Iterable[dict[str, Any]], views: list[str], output_dir: Path,
                         field: str = "faithfulness", task: str = "") -> list[Path]:
    """``deletion_curve_<view>.png``: per method, the mean normalised score after deleting the top-ranked blocks
    (the ``curve`` of each view in the records' ``field``); ``task``: the report's one-task figure,
    ``<task>.deletion_curve_<view>.png``, titled by the task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = mean_deletion_curves(records, views, field)
    written = []
    for v in views:
        if not curves[v]:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.6), dpi=120)
        for method, (mean, n) in curves[v].items():
            ax.plot(GRID, mean, marker="o", markersize=2.5, label=f"{method} (n={n})")
        ax.set_xlabel("fraction of deletion steps (most attributed first)")
        ax.set_ylabel("normalised log p(target)")
        ax.set_title(f"{task + ': ' if task else ''}deletion curve, {VIEW_LABELS[v]} view (lower area = more "
                     f"faithful)", fontsize=9 if task else None)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = Path(output_dir) / f"{safe_filename(task) + '.' if task else ''}deletion_curve_{v}.png"
        save_png(fig, path)
        plt.close(fig)
        written.append(path)
    return written
