"""The report's figures (PNG beside ``table1.md``, inlined in ``report.html``): per task, a dot-and-interval chart of
each headline metric per method, the controls drawn apart (grey squares), so that a reader sees at a glance where a
method stands against what a model-free method gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from ctxbench.utils.files import safe_filename, save_png
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
        rows = {me: (st["mean"], st.get("ci_low"), st.get("ci_high")) for me in methods
                if (st := least.ranked(cells.get((task, me)), m["label"])) is not None}
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
    return _save(fig, f"{task}: mean and 95% interval per method (grey squares: controls)",
                 folder / f"{safe_filename(task)}.png")


def deletion_set_chart(task: str, methods: Sequence[str], cells: Mapping[tuple[str, str], dict], folder: Path,
                       sets: Sequence[str] = ("all", "nonstop")) -> Optional[Path]:
    """``<folder>/<task>.sets.png``: for RISE and MAS, each method's rank (1 = best, the lowest) under the paper's
    mixed deletion sets and under each common set, joined by a line (a slope chart: a crossing is an order that
    depends on the set); the methods with a figure under every set drawn. None when no common set was scored."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ctxbench.metrics.faithfulness import COMMON_METRICS, common_key

    panels = []
    for metric in COMMON_METRICS:
        columns = [("mixed", metric)] + [(c, common_key(metric, c)) for c in sets]
        values = {me: [cells.get((task, me), {}).get(label) for _, label in columns] for me in methods}
        values = {me: v for me, v in values.items() if all(x is not None for x in v)}
        if len(values) >= 2:
            ranks = {me: [1 + sorted(x[i] for x in values.values()).index(v[i]) for i in range(len(columns))]
                     for me, v in values.items()}
            panels.append((metric, [name for name, _ in columns], ranks))
    if not panels:
        return None
    n = max(len(r) for _, _, r in panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 1.0 + 0.32 * n), dpi=110, squeeze=False)
    for ax, (metric, names, ranks) in zip(axes[0], panels):
        for k, (me, r) in enumerate(ranks.items()):
            ax.plot(range(len(names)), r, marker="o", color=f"C{k % 10}", linewidth=1.5)
            ax.annotate(me, (0, r[0]), xytext=(-6, 0), textcoords="offset points", ha="right", va="center",
                        fontsize=7)
            ax.annotate(me, (len(names) - 1, r[-1]), xytext=(6, 0), textcoords="offset points", va="center",
                        fontsize=7)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(["mixed\n(paper's)"] + [f"common\n{c}" for c in names[1:]], fontsize=7)
        ax.set_yticks([])
        ax.set_ylim(len(ranks) + 0.5, 0.5)  # rank 1 on top
        ax.set_xlim(-1.9, len(names) - 1 + 1.9)
        ax.set_title(f"{metric}: rank by deletion set (1 = best)", fontsize=8)
    return _save(fig, f"{task}: the faithfulness order under each deletion set",
                 folder / f"{safe_filename(task)}.sets.png")


def _save(fig, title: str, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
    return path
