"""The Tracker interface: one per option of the ``logger`` group (``conf/logger/<name>.yaml`` names its class with
``_target_``; several can be selected at once, ``logger=[mlflow,csv]``).

A job's trackers are checked before the stage loads anything (``check``: a tracker that is down or misconfigured
ends the job with one line, or, with ``best_effort``, is dropped with a warning); the run is opened when the stage
accepts the job (``start``, right after its first write into the job folder: a refused rerun leaves no run behind),
and the job's record (``ctxbench.tracking.record``) is logged when the stage ends, whether it finished or failed
(``log``, then ``finish``). What ``start`` returns is kept in the job folder's ``tracking.json`` and handed back to
``start`` when the job is resumed in its folder, so that a tracker can continue its run instead of opening another.
"""

from __future__ import annotations

import importlib.util
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from ctxbench.core.errors import ConfigError
from ctxbench.core.part import Part
from ctxbench.tracking.record import JobRecord


@dataclass(frozen=True)
class JobInfo:
    """Where and what a job is: its folder, its sweep's folder (``-m``; None for a single run) and its stage."""

    job_dir: Path
    stage: str
    sweep_dir: Optional[Path] = None

    @property
    def name(self) -> str:
        return self.job_dir.name


@dataclass
class Tracker(Part, ABC):
    """``best_effort``: a tracker that cannot be reached or fails to log warns instead of ending the job (the job's
    own files are written either way). Subclasses are dataclasses whose fields are the tracker's parameters."""

    name: ClassVar[str] = ""
    requires: ClassVar[str] = ""  # the package the tracker imports (extra `tracking`), checked first

    best_effort: bool = False

    def check(self, job: JobInfo) -> None:
        """Raise ``ConfigError`` (one line) when the tracker cannot take this job; called before anything loads.
        Here: its package is installed."""
        if self.requires and importlib.util.find_spec(self.requires) is None:
            raise ConfigError(f"logger.{self.name}: the {self.requires} package is not installed "
                              f"(pip install -e '.[tracking]')")

    @abstractmethod
    def start(self, job: JobInfo, state: Optional[dict[str, Any]]) -> dict[str, Any]:
        """Open the job's run, or continue the one ``state`` (what an earlier ``start`` returned) names; return what
        identifies the run."""

    @abstractmethod
    def log(self, record: JobRecord) -> None:
        """Log the job's parameters, tags, metrics (with steps where they have them) and artifacts."""

    def finish(self, status: str) -> None:
        """Close the run; ``status`` is ``FINISHED``, ``FAILED`` or ``KILLED``."""


def read_state(path: Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def write_state(path: Path, key: str, entry: dict[str, Any]) -> None:
    from ctxbench.utils.files import atomic_write_text

    state = read_state(path)
    state[key] = entry
    atomic_write_text(path, json.dumps(state, indent=2) + "\n")
