"""``logger=csv``: a job's figures as CSV, the tracker that needs nothing: ``<job dir>/metrics.csv`` (``name, step,
value``, one line per metric and step) and ``<job dir>/params.csv`` (``key, value``); a job of a multirun also sets
its row of ``<sweep folder>/metrics.csv`` (one row per job, named by its folder, which names its overrides; every
metric a column), which a spreadsheet or pandas reads across hundreds of jobs.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from ctxbench.utils.files import atomic_write_text
from ctxbench.tracking.base import JobInfo, Tracker
from ctxbench.tracking.record import JobRecord

METRICS_CSV = "metrics.csv"
PARAMS_CSV = "params.csv"


@dataclass
class CsvTracker(Tracker):
    """No parameters beyond ``best_effort``: the files go into the job's folder and its sweep's."""

    name: ClassVar[str] = "csv"

    def __post_init__(self) -> None:
        self._job: Optional[JobInfo] = None

    def start(self, job: JobInfo, state: Optional[dict[str, Any]]) -> dict[str, Any]:
        self._job = job
        return {}

    def log(self, record: JobRecord) -> None:
        rows = [[k, 0, repr(v)] for k, v in record.metrics.items()]
        rows += [[k, step, repr(v)] for k, vs in record.series.items() for step, v in enumerate(vs)]
        atomic_write_text(record.job_dir / METRICS_CSV, _csv([["name", "step", "value"], *rows]))
        atomic_write_text(record.job_dir / PARAMS_CSV, _csv([["key", "value"], *sorted(record.params.items())]))
        if self._job is not None and self._job.sweep_dir is not None:
            sweep_row(Path(self._job.sweep_dir) / METRICS_CSV, record.name, record.metrics)


def sweep_row(path: Path, job: str, metrics: dict[str, float]) -> None:
    """Set ``job``'s row of the sweep's wide table (columns: job, then every metric any job has), under a lock: the
    jobs of a launcher write at the same time."""
    from filelock import FileLock

    from ctxbench.utils.locks import lock_path

    with FileLock(str(lock_path(path))):
        table: dict[str, dict[str, str]] = {}
        if path.exists():
            for row in csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))):
                table[row["job"]] = {k: v for k, v in row.items() if k != "job" and v != ""}
        table[job] = {k: repr(v) for k, v in metrics.items()}
        columns = sorted({k for row in table.values() for k in row})
        rows = [[name, *[row.get(c, "") for c in columns]] for name, row in sorted(table.items())]
        atomic_write_text(path, _csv([["job", *columns], *rows]))


def _csv(rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()
