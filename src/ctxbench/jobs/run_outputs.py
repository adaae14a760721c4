"""What a run_exp job writes besides its per-example results, and how the reports read those settings back.

``RunOutputs`` holds the stage-level keys that say which views are scored and which extra files a job writes. The
run's config (``ctxbench.stages.conf.RunConfig``) inherits them, so they stay flat keys on the command line
(``views=[seq]``, ``html=false``), and their defaults are written once, here. A report reading a job folder made before
a key existed takes the same default through ``run_setting``.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, List

from ctxbench.core.part import param
from ctxbench.metrics.stats import StatsSettings


@dataclass
class RunOutputs:
    views: List[str] = field(default_factory=lambda: ["seq", "row", "rec"])  # token views scored by every mode
    # heat maps of the first N examples: heatmaps/<method>/<example>.html and in report.html
    heatmaps: int = param(0, ge=0)
    html: bool = True  # write report.html (docs/report.md): tables, figures and the heat maps, in one file
    save_traces: bool = False  # write per-example hop vectors as .npz under traces/<method>/
    # intervals and paired comparisons of summary.json/summary.md (docs/metrics.md#statistics); run.yaml: seed=${seed}
    stats: StatsSettings = field(default_factory=StatsSettings)


def run_setting(config: dict, key: str) -> Any:
    """``key`` (a ``RunOutputs`` field) of a run_exp job's stored config (its manifest), or the default when the job
    was made before the key existed; ``stats`` comes back as a ``StatsSettings``."""
    f = next(f for f in fields(RunOutputs) if f.name == key)
    if key in config:
        return StatsSettings(**(config[key] or {})) if key == "stats" else config[key]
    return f.default_factory() if f.default_factory is not MISSING else f.default
