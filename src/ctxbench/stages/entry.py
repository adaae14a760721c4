"""What the thin @hydra.main entries share: schema registration, output dir, clean exit for unimplemented steps."""

from __future__ import annotations

import logging
import sys
from typing import Callable

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from ctxbench.errors import NotYetImplementedError

log = logging.getLogger("ctxbench")

EXIT_NOT_IMPLEMENTED = 3


def run_entry(stage: Callable[[DictConfig, str], object], cfg: DictConfig):
    output_dir = HydraConfig.get().runtime.output_dir
    try:
        return stage(cfg, output_dir)
    except NotYetImplementedError as exc:
        log.error("NOT YET IMPLEMENTED: %s", exc)
        sys.exit(EXIT_NOT_IMPLEMENTED)
