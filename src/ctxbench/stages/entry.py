"""What the thin @hydra.main entries share: schema registration, the config folder, the output dir, and a clean
non-zero exit for steps that are not implemented."""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig

from ctxbench.errors import NotYetImplementedError

log = logging.getLogger("ctxbench")

EXIT_NOT_IMPLEMENTED = 3


def run_entry(stage: Callable[[DictConfig, str], object], cfg: DictConfig):
    from hydra.core.hydra_config import HydraConfig

    output_dir = HydraConfig.get().runtime.output_dir
    try:
        return stage(cfg, output_dir)
    except NotYetImplementedError as exc:
        log.error("NOT YET IMPLEMENTED: %s", exc)
        sys.exit(EXIT_NOT_IMPLEMENTED)


def hydra_entry(entry_file: str, config_name: str, stage: str) -> Callable[[], object]:
    """The main function of an entry script: ``stage`` ("module:function") runs on the composed ``config_name``.

    The config folder is ``conf/`` of the project holding ``entry_file`` (``exp/exp2/<script>.py``); each main config
    names its Hydra job (``hydra.job.name``), so logs and run dirs are named for the stage, not for this module.
    """
    import hydra

    from ctxbench.conf import register_configs

    register_configs()
    conf_dir = Path(entry_file).resolve().parents[2] / "conf"

    def task(cfg: DictConfig):
        module, _, function = stage.partition(":")
        return run_entry(getattr(importlib.import_module(module), function), cfg)

    return hydra.main(version_base="1.3", config_path=str(conf_dir), config_name=config_name)(task)
