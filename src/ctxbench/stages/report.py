"""report: aggregate run_exp jobs (a multirun folder or several runs) into one Table-1 style table."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from ctxbench.reporting.aggregate import find_jobs, write_table1

log = logging.getLogger(__name__)


def report_stage(cfg: DictConfig, output_dir: str | Path) -> dict:
    jobs = find_jobs(list(cfg.runs))
    md_path, csv_path, md = write_table1(jobs, output_dir, view=cfg.view)
    print(md)
    log.info("%d runs -> %s, %s", len(jobs), md_path, csv_path)
    return {"markdown": str(md_path), "csv": str(csv_path)}
