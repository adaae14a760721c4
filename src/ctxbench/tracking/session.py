"""A job's trackers and objective, wired around its stage (``ctxbench.stages.entry.run_entry``; docs/tracking.md).

``JobTracking.for_job`` builds the ``logger`` group's trackers and checks each before the stage runs, so that a
tracker that is down or misconfigured ends the job with one line before any model loads (a ``best_effort`` one is
dropped with a warning instead). The runs open when the stage accepts the job (its first write into the job folder)
and continue the runs named in the folder's ``tracking.json`` when the job is resumed there; ``end`` logs the job's
record (``ctxbench.tracking.record``) and closes them with the job's status. A tracker that fails while logging ends
the job with one line after its files are written (``best_effort``: a warning): nothing of the job is lost.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ctxbench.core.errors import ConfigError, UserError
from ctxbench.tracking.base import JobInfo, Tracker, read_state, write_state
from ctxbench.tracking.record import STATE, JobRecord, job_record

log = logging.getLogger(__name__)


class JobTracking:
    def __init__(self, trackers: dict[str, Tracker], job: JobInfo, record: Callable[[], JobRecord]):
        self.trackers = trackers
        self.job = job
        self._record = record
        self.started = False
        self._open: list[str] = []  # the trackers whose run is open
        self.seconds: dict[str, float] = {}  # time spent in each tracker (checks, runs, logging): its overhead

    @classmethod
    def for_job(cls, cfg: Any, job: JobInfo) -> "JobTracking":
        """The trackers of ``cfg.logger`` (none when the config has no such group), each checked (module doc)."""
        from ctxbench.core.part import build_all

        nodes = cfg.get("logger")
        trackers = build_all(nodes, "logger", Tracker) if nodes else {}
        seconds = {}
        for key, tracker in list(trackers.items()):
            t0 = time.perf_counter()
            try:
                tracker.check(job)
            except UserError as exc:
                if not tracker.best_effort:
                    raise
                log.warning("%s (best_effort: the job goes on without it)", exc)
                del trackers[key]
            seconds[key] = time.perf_counter() - t0
        session = cls(trackers, job, lambda: job_record(job.job_dir, job.stage, **_scoring(cfg)))
        session.seconds.update(seconds)
        return session

    def start(self) -> None:
        """Open (or continue) each tracker's run; called when the job is accepted."""
        self.started = True
        path = self.job.job_dir / STATE
        state = read_state(path)
        for key, tracker in list(self.trackers.items()):
            entry = self._guard(key, lambda: tracker.start(self.job, state.get(key)))
            if entry is None:
                continue
            self._open.append(key)
            write_state(path, key, entry)

    def end(self, status: str) -> Optional[JobRecord]:
        """Log the job's record to each started tracker and close its run; returns the record (None before the job
        was accepted: it wrote nothing)."""
        if not self.started:
            return None
        record = self._record()
        for key in self._open:
            tracker = self.trackers[key]
            # a failed job's own error is the one to report: a tracker failing on top of it only warns
            self._guard(key, lambda: (tracker.log(record), tracker.finish(status)), warn=status != "FINISHED")
        self._open = []
        if self.seconds:
            log.info("trackers took %s", ", ".join(f"{k} {s:.2f} s" for k, s in self.seconds.items()))
        return record

    def _guard(self, key: str, call: Callable[[], Any], warn: bool = False) -> Any:
        """``call()`` timed (``seconds``); its failure is one line naming the tracker, or a warning that drops it."""
        tracker = self.trackers[key]
        t0 = time.perf_counter()
        try:
            return call()
        except Exception as exc:
            line = f"logger.{key}: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
            if not (tracker.best_effort or warn):
                raise ConfigError(f"{line} (the job's files are in {self.job.job_dir}; best_effort=true makes this "
                                  f"a warning)") from exc
            log.warning("%s (%s)", line, "best_effort: the job goes on without it" if tracker.best_effort else
                        "the job had already failed")
            del self.trackers[key]
            return None
        finally:
            self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - t0


def _scoring(cfg: Any) -> dict[str, Any]:
    """run_exp's scorers and views (the metrics with steps come from them); nothing for other stages."""
    mode = cfg.get("mode")
    if not mode:
        return {}
    from ctxbench.metrics.scorer import Scorer
    from ctxbench.core.part import build_all

    parts = build_all(mode, "mode")
    return {"scorers": {k: s for k, s in parts.items() if isinstance(s, Scorer)}, "views": list(cfg.get("views", []))}


def job_info(job_dir: str | Path, stage: str, sweep_dir: Optional[str | Path]) -> JobInfo:
    return JobInfo(Path(job_dir), stage, Path(sweep_dir) if sweep_dir else None)
