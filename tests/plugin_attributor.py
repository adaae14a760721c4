"""A method defined outside the library that dies the first time it runs (a stand-in for a run killed in the middle
of an example): the random baseline's scores, after ``flag`` exists."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ctxbench.attribution.baselines import RandomAttributor


@dataclass
class StopOnceAttributor(RandomAttributor):
    flag: str = ""

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        if not Path(self.flag).exists():
            Path(self.flag).touch()
            raise RuntimeError("stopped in the middle of an example")
        return super()._attribute(model, tokenizer, ctx, sink, think, timings)
