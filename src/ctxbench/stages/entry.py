"""What the thin @hydra.main entries share: schema registration, the config folder, the output dir, and the exit of a
user error (bad data, config or path): one line on stderr and exit code 2; ``HYDRA_FULL_ERROR=1`` shows the traceback
instead."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig

from ctxbench.core.errors import UserError


EXIT_USER_ERROR = 2
log = logging.getLogger(__name__)


class TrialFailed(Exception):
    """A job of an optimising sweep that ended with a user error: the sweeper records the trial as failed and goes on
    (``hydra.sweeper.max_failure_rate``), where an exit would end the whole study."""


class Terminated(KeyboardInterrupt):
    """A SIGTERM, raised where the stage is, so that it stops as at a Ctrl-C: what is written stays, one line says
    what was kept and how to resume."""


@contextmanager
def sigterm_as_interrupt():
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return

    def stop(signum, frame):
        raise Terminated()

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


# The jobs of a dry-run sweep that were refused (their folders), said together when the sweep ends.
REFUSED_IN_DRY_RUN: list[str] = []


@contextmanager
def user_errors(trial: bool = False, dry_job: str | None = None):
    """A user error leaves as one line and exit code 2 (its traceback only with HYDRA_FULL_ERROR=1); in a trial of an
    optimising sweep (``trial``) the line is printed and the job fails as ``TrialFailed``; in a job of a dry-run
    sweep (``dry_job``: its folder) the line names the job and the sweep goes on to check the next one."""
    from omegaconf.errors import MissingMandatoryValue

    try:
        yield
    except (UserError, MissingMandatoryValue) as exc:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if isinstance(exc, MissingMandatoryValue):  # a key the chosen option leaves to the user (``???``)
            key = exc.full_key or "a key"
            exc = UserError(f"{key}: no value given; this option needs one ({key}=...)")
        if dry_job is not None:
            print(f"error: {dry_job}: {exc}", file=sys.stderr)
            REFUSED_IN_DRY_RUN.append(dry_job)
            return
        print(f"error: {exc}", file=sys.stderr)
        if trial:
            raise TrialFailed(str(exc)) from None
        sys.exit(EXIT_USER_ERROR)


def run_entry(stage: Callable[[DictConfig, str], object], cfg: DictConfig):
    """The stage in its job folder (``ctxbench.stages.jobdir``): nothing of the folder changes before the stage
    accepts the run; a Ctrl-C ends with one line saying what was kept and the command that resumes, exit code 130."""
    from ctxbench.stages.jobdir import JobDir, shown
    from ctxbench.tracking.session import JobTracking, job_info

    job = JobDir.from_hydra(cfg)
    # where the run writes, first (a sweep: its folder too) and what it wrote, last
    log.info("job folder: %s%s", shown(job.path), f" (sweep folder {shown(job.sweep_dir)})" if job.sweep_dir else "")
    objective = cfg.get("objective")
    dry_job = shown(job.path) if cfg.get("dry_run") and job.sweep_dir is not None else None
    with user_errors(objective is not None and job.sweep_dir is not None, dry_job), job.active():
        # the experiment trackers: checked now, before anything loads; their runs open when the job is accepted
        tracking = JobTracking.for_job(cfg, job_info(job.path, job.stage, job.sweep_dir))
        job.on_accept(tracking.start)
        try:
            with sigterm_as_interrupt():
                result = stage(cfg, str(job.path))
        except KeyboardInterrupt as exc:
            tracking.end("KILLED")
            job.interrupted(terminated=isinstance(exc, Terminated))
        except BaseException:
            tracking.end("FAILED")
            raise
        job.accept()  # a stage that wrote nothing of its own still leaves Hydra's record of the job
        record = tracking.end("FINISHED")
        job.keep_record_if_idle()
        written = job.written()
        log.info("wrote in %s: %s", shown(job.path), written)
        if written == "nothing":
            job.forget_run()
        if objective is None:
            return result
        from ctxbench.tracking.objective import objective_value

        value = objective_value(objective, record)
        log.info("objective %s = %r", objective, value)
        return value  # what an optimising sweeper (hydra/sweeper=optuna) reads


def hydra_entry(entry_file: str, config_name: str, stage: str) -> Callable[[], object]:
    """The main function of an entry script: ``stage`` ("module:function") runs on the composed ``config_name``.

    The config folder is ``conf/`` of the project holding ``entry_file`` (``exp/exp2/<script>.py``); each main config
    names its Hydra job (``hydra.job.name``), so logs and run dirs are named for the stage, not for this module.
    """
    import hydra

    from ctxbench.stages.conf import register_configs

    conf_dir = Path(entry_file).resolve().parents[2] / "conf"
    with user_errors():
        register_configs(conf_dir)

    def task(cfg: DictConfig):
        module, _, function = stage.partition(":")
        return run_entry(getattr(importlib.import_module(module), function), cfg)

    from ctxbench.stages import run_dirs

    run_dirs.exit_on_error = True  # a bad resume= (resolved by Hydra, outside the task) is one line and exit code 2
    hydra_main = hydra.main(version_base="1.3", config_path=str(conf_dir), config_name=config_name)(task)

    def main():
        from ctxbench.stages.preflight import app_help, check_overrides
        from ctxbench.stages.resume import resumed_args

        from ctxbench.tracking.objective import with_sweeper_defaults

        args = sys.argv[1:] = with_sweeper_defaults(sys.argv[1:])
        name = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--config-name", "-cn")), config_name)
        message = check_overrides(conf_dir, name, [a for a in args if a not in ("--help", "-h")])
        if message is not None:  # a config mistake: one line, exit code 2
            print(f"error: {message}", file=sys.stderr)
            sys.exit(EXIT_USER_ERROR)
        if "--help" in args or "-h" in args:
            print(app_help(conf_dir, name, Path(entry_file).stem, args), end="")
            return None
        with user_errors():  # resume=: the run goes on with its recorded settings (ctxbench.stages.resume)
            sys.argv[1:] = resumed_args(conf_dir, name, args)
        result = hydra_main()
        if REFUSED_IN_DRY_RUN:  # a dry-run sweep checked every job: the refused ones, together
            n = len(REFUSED_IN_DRY_RUN)
            print(f"error: dry run: {n} job{'s' * (n != 1)} of the sweep refused: {', '.join(REFUSED_IN_DRY_RUN)}",
                  file=sys.stderr)
            sys.exit(EXIT_USER_ERROR)
        return result

    return main
