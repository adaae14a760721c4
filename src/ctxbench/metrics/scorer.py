"""The Scorer interface: one per mode of run_exp (``conf/mode/<name>.yaml`` names its class with ``_target_``).

A scorer says what it measures (its metrics, their labels and directions), refuses data it cannot score before any work
is done, scores one attribution of one example into fields of that example's result record, and reduces the records to
the figures of ``summary.json`` / ``summary.md``, the CSVs in FlashTrace's layout and the report command. The stage, the
evaluation loop and the reports only ever talk to this interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Iterable, Optional

import numpy as np

from ctxbench.core.errors import ConfigError
from ctxbench.core.part import Part
from ctxbench.core.part import build_all

VIEW_LABELS = {"seq": "Seq", "row": "Row", "rec": "Recursive"}


@dataclass(frozen=True)
class Metric:
    key: str  # the field in a record's per-view values
    label: str  # the column title in tables and reports (may depend on the scorer's parameters)
    higher_is_better: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def mean_std(values: list[float]) -> tuple[Optional[float], Optional[float]]:
    """Mean and population standard deviation (FlashTrace's), None for no values."""
    if not values:
        return None, None
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std())


class Scorer(Part, ABC):
    """``name`` is the record field holding the per-view values and the summary key; the config key of the mode must be
    the same (``mode.<name>``). Subclasses are dataclasses whose fields are the mode's parameters."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""  # the heading of the scorer's section in summary.md
    csv_label: ClassVar[str] = "Scores"  # "<View> Attr <csv_label> Mean" rows of FlashTrace's CSV
    csv_std_label: ClassVar[str] = "Std"
    needs_model: ClassVar[bool] = True  # False: scores from the attribution and the data alone (the model may be None)
    # True: scores with the model's log-probabilities only, so a served model can do its passes (model=openai)
    log_probs_only: ClassVar[bool] = False

    @abstractmethod
    def metrics(self) -> list[Metric]:
        ...

    def csv_metrics(self) -> list[Metric]:
        """The columns of the mode's per-method CSV in FlashTrace's layout (``reporting.tables``): every metric."""
        return self.metrics()

    def check(self, examples: list, dataset: str) -> None:
        """Raise ``ExampleRefused`` when the data cannot be scored at all (called before the model is loaded)."""

    def use_job_dir(self, path) -> None:
        """Where the run writes (the stage calls it before scoring): a scorer that keeps work for reruns keeps it
        there (none by default)."""

    def memory_need(self, shape, T: int, G: int):
        """Estimated memory the scoring of one attribution adds over the loaded model on an input of T tokens, G
        generated (a ``ctxbench.attribution.memory.Need``); None: no estimate (the scorer runs no model)."""
        return None

    @abstractmethod
    def score(self, model, tokenizer, prepared, result, weights: dict[str, np.ndarray]) -> dict[str, Any]:
        """Record fields for one example and one attribution (``weights``: prompt weights per view); the field
        ``self.name`` holds ``{view: values}`` or None when this example could not be scored."""

    @abstractmethod
    def values(self, view_record: Any) -> Optional[dict[str, Optional[float]]]:
        """``{metric key: value}`` from one view's entry of the record field (None: not scored)."""

    # --- aggregation (summary.json, summary.md, CSV, report) -----------------------------------------------------

    def example_values(self, records: list[dict], views: Iterable[str]) -> Optional[dict[str, dict[str, dict]]]:
        """``{view: {metric key: {example id: value}}}`` of the examples scored (None values left out), over the
        records that carry this scorer's field (None if none): what summaries and paired comparisons are made of."""
        carrying = [r for r in records if self.name in r]
        if not carrying:
            return None
        out: dict[str, dict[str, dict]] = {}
        for v in views:
            per_view = [(r["example_id"], self.values(r[self.name].get(v))) for r in carrying if r[self.name]]
            out[v] = {m.key: {eid: pv[m.key] for eid, pv in per_view if pv is not None and pv.get(m.key) is not None}
                      for m in self.metrics()}
        return out

    def aggregate(self, records: list[dict], views: Iterable[str]) -> Optional[dict[str, Any]]:
        """``{view: {metric key: {mean, std, n}}}`` over the records that carry this scorer's field (None if none)."""
        per = self.example_values(records, views)
        if per is None:
            return None
        out: dict[str, Any] = {}
        for v, by_metric in per.items():
            out[v] = {}
            for key, vals in by_metric.items():
                mean, std = mean_std(list(vals.values()))
                out[v][key] = {"mean": mean, "std": std, "n": len(vals)}
        return out

    def describe(self) -> dict[str, Any]:
        """What the reports need to know without this class: title and metrics (written into summary.json)."""
        return {"title": self.title, "metrics": [m.to_dict() for m in self.metrics()]}


def build_scorers(nodes) -> dict[str, "Scorer"]:
    """The ``mode`` group's scorers, keyed as in the config; a scorer files its results under its ``name``, so the
    key must be that name."""
    scorers = build_all(nodes, "mode", Scorer)
    for key, sc in scorers.items():
        if sc.name != key:
            raise ConfigError(f"mode.{key}: the scorer writes its results under {sc.name!r}; name the mode {sc.name}")
    return scorers
