"""The ordering of methods against the paper's Table 1 (``resources/table1/paper.csv``, its sources in the README
beside it): per task and metric, the paper's order and this report's over the methods both have, and the pairs that
change places, each with this report's paired comparison when it made one. Figures of another model and other
examples: what can be compared is the order, not the values."""

from __future__ import annotations

import csv
from importlib import resources
from itertools import combinations
from pathlib import Path
from typing import Any, Optional

from ctxbench.reporting.results_table import Table, text_table

KEYS = ("dataset", "method")


def paper_csv() -> Path:
    return Path(str(resources.files("ctxbench") / "resources" / "table1" / "paper.csv"))


def load_paper(path: Optional[str | Path] = None) -> dict[tuple[str, str], dict[str, float]]:
    """``{(dataset, method): {metric label: value}}``; an empty cell is a figure the paper's sources do not give."""
    with open(path or paper_csv(), newline="", encoding="utf-8") as fp:
        return {(r["dataset"], r["method"]): {k: float(v) for k, v in r.items() if k not in KEYS and v}
                for r in csv.DictReader(fp)}


def ranked(values: dict[str, float], higher_is_better: bool) -> str:
    """Best first, ``=`` between equal values: ``"a, b = c"``."""
    order = sorted(values, key=lambda m: -values[m] if higher_is_better else values[m])
    text = order[0]
    for prev, m in zip(order, order[1:]):
        text += (" = " if values[m] == values[prev] else ", ") + m
    return text


def _comparison(comps: list[dict], dataset: str, label: str, x: str, y: str) -> Optional[dict]:
    return next((c for c in comps if c["dataset"] == dataset and c["label"] == label and {c["a"], c["b"]} == {x, y}),
                None)


def ordering_rows(datasets: list[str], methods: list[str], metrics: list[dict[str, Any]],
                  cells: dict[tuple[str, str], dict], comps: list[dict],
                  paper: dict[tuple[str, str], dict[str, float]]) -> list[dict[str, Any]]:
    """Per task and metric with two or more methods in both tables: ``paper`` and ``here`` (``ranked``), and
    ``swapped``: the pairs in the other order, ``{"paper": the better there, "here": the better here, "significant":
    True/False from this report's paired comparison, None when it compared them not}`` (a tie on either side is no
    swap)."""
    rows = []
    for d in datasets:
        for m in metrics:
            label, higher = m["label"], m["higher_is_better"]
            here = {me: cells[(d, me)][label] for me in methods
                    if cells.get((d, me), {}).get(label) is not None and label in paper.get((d, me), {})}
            if len(here) < 2:
                continue
            there = {me: paper[(d, me)][label] for me in here}
            swapped = []
            for x, y in combinations(here, 2):
                if there[x] == there[y] or here[x] == here[y] or (there[x] > there[y]) == (here[x] > here[y]):
                    continue
                p_best = x if (there[x] > there[y]) == higher else y
                h_best = y if p_best == x else x
                c = _comparison(comps, d, label, x, y)
                significant = None if c is None else \
                    bool(c["significant"]) and c["better"] is not None and c[c["better"]] == h_best
                swapped.append({"paper": p_best, "here": h_best, "significant": significant})
            rows.append({"dataset": d, "metric": label, "paper": ranked(there, higher), "here": ranked(here, higher),
                         "swapped": swapped})
    return rows


def _swap_text(s: dict[str, Any]) -> str:
    how = {True: "significant here", False: "not significant here", None: "not compared here"}[s["significant"]]
    return f"{s['here']} before {s['paper']} ({how})"


def ordering_table(rows: list[dict[str, Any]]) -> Table:
    """``ordering_rows`` as a table: per task and metric the order in the paper and here, and the pairs swapped."""
    return text_table(("task", "metric", "paper", "here", "pairs in the other order"),
                      [[r["dataset"], r["metric"], r["paper"], r["here"],
                        "; ".join(_swap_text(s) for s in r["swapped"]) or "none"] for r in rows])
