"""``logger=mlflow``: every job an MLflow run (the ``mlflow`` package, extra ``tracking``; docs/tracking.md).

The embedded default stores runs in the project: a SQLite database and an artifact folder under ``outputs/mlflow/``
(``mlflow ui --backend-store-uri sqlite:///outputs/mlflow/mlflow.db`` browses them); ``tracking_uri`` names any other
store or a tracking server (``http://host:5000``). A job of a multirun is a child run of the sweep's parent run
(``mlflow.parentRunId``), made by the first job of the sweep that gets there, under any launcher (its id is kept in
the sweep folder's ``tracking.json``, behind a file lock); the parent is ended by the sweep's end
(``ctxbench.tracking.callback``). The experiment is ``experiment`` or the stage's name (``run_exp``,
``sample_and_filter``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional
from urllib.parse import urlparse

from ctxbench.core.errors import ConfigError
from ctxbench.core.part import neutral
from ctxbench.tracking.base import JobInfo, Tracker, read_state, write_state
from ctxbench.tracking.record import STATE, JobRecord

log = logging.getLogger(__name__)

MAX_PARAM_VALUE = 6000  # MLflow's limits (mlflow.utils.validation): a longer value is cut, a batch split
MAX_PARAMS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
PARENT_TAG = "mlflow.parentRunId"


@dataclass
class MlflowTracker(Tracker):
    """``tracking_uri``: where runs go (``sqlite:///<file>``, ``file:<folder>``, ``http(s)://<server>``, ...);
    ``artifact_location``: the artifact folder of an experiment this tracker creates on a local store (null: MLflow's
    default); ``experiment``: the experiment's name (null: the stage's); ``timeout_s``: how long a tracking server
    may take to answer (the check before the job, and each request)."""

    name: ClassVar[str] = "mlflow"
    requires: ClassVar[str] = "mlflow"

    tracking_uri: str = "sqlite:///outputs/mlflow/mlflow.db"
    artifact_location: Optional[str] = None
    experiment: Optional[str] = None
    timeout_s: float = neutral(10.0, gt=0)

    def __post_init__(self) -> None:
        # an unreachable server fails after timeout_s, not after MLflow's minutes of retries
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(int(self.timeout_s)))
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        self._client: Any = None
        self._run_id: Optional[str] = None

    # --- the interface ---------------------------------------------------------------------------------------------

    def check(self, job: JobInfo) -> None:
        super().check(job)
        uri = self.tracking_uri
        scheme = urlparse(uri).scheme
        if scheme in ("http", "https"):
            import requests

            try:
                requests.get(uri.rstrip("/") + "/health", timeout=self.timeout_s).raise_for_status()
            except requests.RequestException as exc:
                raise ConfigError(f"logger.mlflow: tracking server {uri} does not answer ({_first_line(exc)}); "
                                  f"start it or set logger.mlflow.tracking_uri") from None
            return
        lock = contextlib.nullcontext()
        if scheme == "sqlite" and uri.startswith("sqlite:///"):
            db = Path(uri[len("sqlite:///"):])
            db.parent.mkdir(parents=True, exist_ok=True)
            # the jobs of a parallel launcher would each create the new database's tables: one does, the others wait
            from filelock import FileLock

            from ctxbench.utils.locks import lock_path

            lock = FileLock(str(lock_path(db)))
        try:
            with lock:
                self._mlflow_client().search_experiments(max_results=1)
        except Exception as exc:  # a malformed URI, a store MLflow cannot open: its own message, first line
            raise ConfigError(f"logger.mlflow: tracking_uri={uri!r} cannot be used: {_first_line(exc)}") from None

    def start(self, job: JobInfo, state: Optional[dict[str, Any]]) -> dict[str, Any]:
        client = self._mlflow_client()
        if state and state.get("tracking_uri") == self.tracking_uri and state.get("run_id"):
            try:
                client.update_run(state["run_id"], status="RUNNING")
                self._run_id = state["run_id"]
                log.info("mlflow: continuing run %s", self._run_id)
                return state
            except Exception as exc:  # deleted meanwhile: a new run
                log.warning("mlflow: run %s of this job cannot be continued (%s); starting a new one",
                            state["run_id"], _first_line(exc))
        experiment_id = self._experiment_id(self.experiment or job.stage)
        tags = {"job_dir": str(job.job_dir), "stage": job.stage}
        if job.sweep_dir is not None:
            tags[PARENT_TAG] = self._parent_run(job, experiment_id)
        run = client.create_run(experiment_id, run_name=job.name, tags=tags)
        self._run_id = run.info.run_id
        log.info("mlflow: run %s (%s) in experiment %s", self._run_id, job.name, self.experiment or job.stage)
        return {"tracking_uri": self.tracking_uri, "experiment_id": experiment_id, "run_id": self._run_id}

    def log(self, record: JobRecord) -> None:
        from mlflow.entities import Metric, Param, RunTag

        client, run_id = self._mlflow_client(), self._run_id
        logged = client.get_run(run_id).data.params
        params = {k[:250]: v[:MAX_PARAM_VALUE] for k, v in record.params.items()}
        changed = sorted(k for k, v in params.items() if k in logged and logged[k] != v)
        if changed:  # MLflow keeps a run's parameters as first logged; the job's manifest.json has this run's
            log.warning("mlflow: run %s keeps its first values of %s", run_id, ", ".join(changed))
        new = [Param(k, v) for k, v in params.items() if k not in logged]
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in record.metrics.items()]
        metrics += [Metric(k, v, now, step) for k, vs in record.series.items() for step, v in enumerate(vs)]
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in record.tags.items()])
        for i in range(0, len(new), MAX_PARAMS_PER_BATCH):
            client.log_batch(run_id, params=new[i:i + MAX_PARAMS_PER_BATCH])
        for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            client.log_batch(run_id, metrics=metrics[i:i + MAX_METRICS_PER_BATCH])
        for rel in record.artifacts:
            parent = rel.parent.as_posix()
            client.log_artifact(run_id, str(record.job_dir / rel), artifact_path=None if parent == "." else parent)

    def finish(self, status: str) -> None:
        if self._run_id is not None:
            self._mlflow_client().set_terminated(self._run_id, status)

    # --- MLflow ----------------------------------------------------------------------------------------------------

    def _mlflow_client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    def _experiment_id(self, name: str) -> str:
        client = self._mlflow_client()
        found = client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        location = Path(self.artifact_location).resolve().as_uri() if self.artifact_location else None
        try:
            return client.create_experiment(name, artifact_location=location)
        except Exception:  # another job of the sweep created it first
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def _parent_run(self, job: JobInfo, experiment_id: str) -> str:
        """The sweep's parent run: the one its ``tracking.json`` names, or a new one made by the first job there."""
        from ctxbench.utils.locks import create_once

        path = Path(job.sweep_dir) / STATE

        def ready() -> Optional[str]:
            entry = read_state(path).get(self.name) or {}
            return entry.get("run_id") if entry.get("tracking_uri") == self.tracking_uri else None

        def make() -> str:
            run = self._mlflow_client().create_run(experiment_id, run_name=Path(job.sweep_dir).name,
                                                   tags={"sweep_dir": str(job.sweep_dir), "stage": job.stage})
            write_state(path, self.name, {"tracking_uri": self.tracking_uri, "experiment_id": experiment_id,
                                          "run_id": run.info.run_id})
            return run.info.run_id

        return create_once(path, ready, make)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0].strip()


def end_parent_run(entry: dict[str, Any], optimization_results: Path) -> None:
    """End a sweep's parent run (``entry``: its ``tracking.json`` entry); an optimising sweep's best value and
    parameters become the parent's ``best_value`` metric and ``best.<param>`` parameters."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient
    from omegaconf import OmegaConf

    client = MlflowClient(tracking_uri=entry["tracking_uri"])
    if optimization_results.exists():
        best = OmegaConf.to_container(OmegaConf.load(optimization_results))
        params = [Param(f"best.{k}"[:250], str(v)[:MAX_PARAM_VALUE])
                  for k, v in (best.get("best_params") or {}).items()]
        metrics = [Metric("best_value", float(best["best_value"]), int(time.time() * 1000), 0)] \
            if best.get("best_value") is not None else []
        logged = client.get_run(entry["run_id"]).data.params
        client.log_batch(entry["run_id"], metrics=metrics, params=[p for p in params if p.key not in logged])
    client.set_terminated(entry["run_id"], "FINISHED")
