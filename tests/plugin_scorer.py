"""A mode defined outside the library, reached only through ``_target_`` (tests that a new mode is one module + one
YAML): the share of the prompt's positive attribution mass that lies on the evidence tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ctxbench.core.errors import ExampleRefused
from ctxbench.metrics.scorer import Metric, Scorer


@dataclass
class EvidenceMassScorer(Scorer):
    name: ClassVar[str] = "evidence_mass"
    title: ClassVar[str] = "Evidence mass"
    scale: float = 1.0  # a parameter, to show that it reaches the label

    def metrics(self):
        return [Metric("mass", f"mass x{self.scale:g}", higher_is_better=True)]

    def check(self, examples, dataset):
        if not any(e.metadata.get("needle_spans") for e in examples):
            raise ExampleRefused(f"evidence_mass needs needle_spans; {dataset} has none")

    def score(self, model, tokenizer, prepared, result, weights):
        gold = prepared.evidence_tokens or []
        out = {}
        for view, w in weights.items():
            w = np.clip(np.nan_to_num(np.asarray(w, dtype=np.float64)), 0, None)
            out[view] = float(self.scale * w[gold].sum() / w.sum()) if w.sum() > 0 and gold else None
        return {self.name: out}

    def values(self, view_record):
        return None if view_record is None else {"mass": view_record}
