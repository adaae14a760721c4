"""The end of a multirun, for the trackers that keep a run for the whole sweep (Hydra's ``on_multirun_end`` callback,
``hydra.callbacks`` in conf/hydra/default.yaml; it runs in the sweeping process whatever the launcher): MLflow's
parent run is ended, with an optimising sweep's best value and parameters (``optimization_results.yaml``) logged to
it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from ctxbench.tracking.base import read_state
from ctxbench.tracking.record import STATE

log = logging.getLogger(__name__)
OPTIMIZATION_RESULTS = "optimization_results.yaml"  # the Optuna sweeper's


class SweepTracking(Callback):
    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        entry = read_state(sweep_dir / STATE).get("mlflow")
        if not entry:
            return
        from ctxbench.tracking.mlflow import end_parent_run

        try:
            end_parent_run(entry, sweep_dir / OPTIMIZATION_RESULTS)
        except Exception as exc:  # the jobs and their runs are done; the parent's status is all that is left
            log.warning("mlflow: the sweep's parent run %s was not ended: %s", entry.get("run_id"), exc)
