"""The report's figures (PNG beside ``table1.md``, inlined in ``report.html``): per task, a dot-and-interval chart of
each headline metric per method, the controls drawn apart (grey squares), so that a reader sees at a glance where a
method stands against what a model-free method gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from ctxbench.files import safe_filename
from ctxbench.reporting.results_table import MinExamples


def interval_chart(task: str, methods: Sequence[str], metrics: Sequence[Mapping[str, Any]],
                   cells: Mapping[tuple[str, str], dict], least: MinExamples, folder: Path,
                   is_control: Callable[[str], bool]) -> Optional[Path]:
    """``<folder>/<task>.png``: one panel per metric, one row per method with a figure the report ranks (its mean, and
    its bootstrap interval as a bar); None when no metric has a figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for m in metrics:
        rows = {}
        for me in methods:
            c = cells.get((task, me))
            st = (c or {}).get("stats", {}).get(m["label"]) or {}
            if c is None or st.get("mean") is None or least.too_few(c["method"], st.get("n") or 0):
                continue
            rows[me] = (st["mean"], st.get("ci_low"), st.get("ci_high"))
        if rows:
            panels.append((m, rows))
    if not panels:
        return None
    # one row per method shown in any panel, at the same height in every panel (the first, top)
    shown = [me for me in methods if any(me in rows for _, rows in panels)]
    at = {me: len(shown) - 1 - i for i, me in enumerate(shown)}
    fig, axes = plt.subplots(1, len(panels), figsize=(2.4 * len(panels) + 1.8, 0.9 + 0.26 * len(shown)), dpi=110,
                             squeeze=False, sharey=True)
    for ax, (m, rows) in zip(axes[0], panels):
        for me, (mean, lo, hi) in rows.items():
            colour = "0.55" if is_control(me) else "C0"
            if lo is not None and hi is not None:
                ax.plot([lo, hi], [at[me], at[me]], color=colour, linewidth=2)
            ax.plot([mean], [at[me]], marker="s" if is_control(me) else "o", color=colour, markersize=5)
        ax.set_title(f"{m['label']} {'↑' if m['higher_is_better'] else '↓'}", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks([at[me] for me in shown])
    axes[0][0].set_yticklabels(shown, fontsize=7)
    axes[0][0].set_ylim(-0.7, len(shown) - 0.3)
    fig.suptitle(f"{task}: mean and 95% interval per method (grey squares: controls)", fontsize=8)
    fig.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{safe_filename(task)}.png"
    fig.savefig(path)
    plt.close(fig)
    return path
