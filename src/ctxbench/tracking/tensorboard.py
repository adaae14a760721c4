"""``logger=tensorboard``: a job's figures as TensorBoard event files (``torch.utils.tensorboard``; the
``tensorboard`` package, extra ``tracking``), in ``<job dir>/tensorboard/`` unless ``log_dir`` says where.
``tensorboard --logdir <sweep folder>`` shows every job of a sweep side by side (each job's folder is a run).

Each metric is a scalar at step 0, a metric with steps (a deletion curve) one scalar per step, the config and the
tags a text each; a resumed job adds an event file beside the first, which TensorBoard reads as one run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from ctxbench.tracking.base import JobInfo, Tracker
from ctxbench.tracking.record import JobRecord


@dataclass
class TensorBoardTracker(Tracker):
    """``log_dir``: the event files' folder (null: ``<job dir>/tensorboard``; a folder given here gets one
    subfolder per job, named as the job's folder)."""

    name: ClassVar[str] = "tensorboard"
    requires: ClassVar[str] = "tensorboard"

    log_dir: Optional[str] = None

    def __post_init__(self) -> None:
        self._writer: Any = None

    def folder(self, job: JobInfo) -> Path:
        return Path(self.log_dir) / job.name if self.log_dir else job.job_dir / "tensorboard"

    def start(self, job: JobInfo, state: Optional[dict[str, Any]]) -> dict[str, Any]:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(self.folder(job)))
        return {"log_dir": str(self.folder(job))}

    def log(self, record: JobRecord) -> None:
        w = self._writer
        w.add_text("config", "\n".join(f"    {k}: {v}" for k, v in sorted(record.params.items())), 0)
        w.add_text("tags", "\n".join(f"    {k}: {v}" for k, v in sorted(record.tags.items())), 0)
        for k, v in record.metrics.items():
            w.add_scalar(k, v, 0)
        for k, values in record.series.items():
            for step, v in enumerate(values):
                w.add_scalar(k, v, step)
        w.flush()

    def finish(self, status: str) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
