"""``logger=wandb``: a job's run in Weights & Biases (the ``wandb`` package, extra ``tracking``), offline unless
``mode: online``: the run is written under ``<job dir>/wandb/offline-run-*`` and ``wandb sync`` uploads it later.

A job of a multirun joins the group named as its sweep folder (W&B's grouping of a sweep's runs); its job type is the
stage. Parameters are the run's config, metrics its summary, a metric with steps is logged step by step, and the
job's files are one artifact of type ``job-files``. The run id is kept in the job folder, so a resumed job continues
its run (``resume="allow"``).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from ctxbench.core.part import param
from ctxbench.tracking.base import JobInfo, Tracker
from ctxbench.tracking.record import JobRecord


@dataclass
class WandbTracker(Tracker):
    """``project`` / ``entity``: where the run goes; ``mode``: offline (no account, no network), online or
    disabled; ``dir``: the folder W&B writes its run into (null: the job's folder)."""

    name: ClassVar[str] = "wandb"
    requires: ClassVar[str] = "wandb"

    project: str = "ctxbench"
    entity: Optional[str] = None
    mode: str = param("offline", choices=("offline", "online", "disabled"))
    dir: Optional[str] = None

    def __post_init__(self) -> None:
        self._run: Any = None

    def start(self, job: JobInfo, state: Optional[dict[str, Any]]) -> dict[str, Any]:
        import wandb

        run_id = (state or {}).get("run_id") or uuid.uuid4().hex[:8]  # (W&B's own ids: 8 characters [a-z0-9])
        folder = Path(self.dir) if self.dir else job.job_dir
        self._run = wandb.init(project=self.project, entity=self.entity, mode=self.mode, dir=str(folder), id=run_id,
                               name=job.name, group=job.sweep_dir.name if job.sweep_dir else None,
                               job_type=job.stage, resume="allow", reinit="create_new",
                               settings=wandb.Settings(console="off", silent=True, x_disable_stats=True))
        return {"run_id": run_id, "mode": self.mode}

    def log(self, record: JobRecord) -> None:
        import wandb

        run = self._run
        run.config.update(record.params, allow_val_change=True)
        run.tags = tuple(f"{k}={v}"[:64] for k, v in record.tags.items())
        for step in range(max((len(v) for v in record.series.values()), default=0)):
            run.log({k: vs[step] for k, vs in record.series.items() if step < len(vs)}, step=step)
        run.summary.update(record.metrics)
        if record.artifacts:
            art = wandb.Artifact(re.sub(r"[^\w.-]", "_", f"job-{record.name}"), type="job-files")
            for rel in record.artifacts:
                art.add_file(str(record.job_dir / rel), name=rel.as_posix())
            run.log_artifact(art)

    def finish(self, status: str) -> None:
        if self._run is not None:
            self._run.finish(exit_code=0 if status == "FINISHED" else 1)
            self._run = None
