"""The resolvers of ``conf/hydra/default.yaml`` that name a stage's run and sweep folders.

``ctxbench.job_dir`` (``hydra.run.dir`` / ``hydra.sweep.dir``) returns a new timestamped folder unless ``resume`` names
one (``latest``: the newest folder beside the new one; or a given folder, which must exist); ``ctxbench.run_group`` is
the dataset segment of a single run's folder. Hydra resolves them before the stage runs, so a mistake here is reported
as one line and exit code 2 when ``exit_on_error`` is set (the command-line entry sets it), else raised as a
``ConfigError``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ctxbench.core.errors import ConfigError
from ctxbench.jobs.results import job_dirs

# set by the command-line entry: a resolver error (raised while Hydra resolves hydra.run.dir, outside the task) then
# ends as one line and exit code 2, like every other user error
exit_on_error = False




def _fail(message: str) -> None:
    if exit_on_error and os.environ.get("HYDRA_FULL_ERROR") != "1":
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.exit(2)
    raise ConfigError(message)


def job_dir(resume: Any, fresh: str) -> str:
    """``hydra.run.dir`` / ``hydra.sweep.dir``: ``fresh`` (a new timestamped folder) unless ``resume`` names one."""
    if resume is None or str(resume) == "":
        return fresh
    resume = str(resume)
    if resume == "latest":
        parent = Path(fresh).parent
        found = sorted(p.name for p in parent.iterdir() if p.is_dir()) if parent.is_dir() else []
        if not found:
            _fail(f"resume=latest: no earlier run in {parent}/ to resume (resume=<folder> names one)")
        return str(parent / found[-1])
    if not Path(resume).is_dir():
        _fail(f"resume={resume}: no such run folder")
    return resume


def run_group(dataset: Any, merge: Any) -> str:
    """The dataset segment of a single run's folder: the dataset's name; for ``run_exp merge=[dirs]`` the dataset of
    the merged shards (``merged`` when they name none, or several)."""
    from omegaconf import OmegaConf

    if not (OmegaConf.is_list(merge) or isinstance(merge, (list, tuple))) or not merge:
        return str(dataset)  # sample_and_filter's merge=true joins shards of the dataset named
    names = set()
    try:
        for d in merge:
            for job in job_dirs(d, must_exist=False):
                names.add((job.read_manifest().get("dataset") or {}).get("name"))
    except (OSError, ValueError, TypeError):
        return "merged"
    return names.pop() if len(names) == 1 and None not in names else "merged"


def register_resolvers() -> None:
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("ctxbench.job_dir", job_dir, replace=True)
    OmegaConf.register_new_resolver("ctxbench.run_group", run_group, replace=True)
    from ctxbench.tracking.objective import direction_resolver

    # the direction of hydra/sweeper=optuna (tracking.objective.OPTUNA_DEFAULTS, conf/experiment/optuna_*.yaml)
    OmegaConf.register_new_resolver("ctxbench.objective_direction", direction_resolver, replace=True)
