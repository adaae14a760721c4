"""Aggregate run_exp jobs into one table: `python exp/exp2/report.py 'runs=[outputs/multirun/run_exp/<time>]'`."""

import hydra
from omegaconf import DictConfig

from ctxbench.conf import register_configs
from ctxbench.stages.entry import run_entry

register_configs()


@hydra.main(version_base="1.3", config_path="../../conf", config_name="report")
def main(cfg: DictConfig):
    from ctxbench.stages.report import report_stage

    return run_entry(report_stage, cfg)


if __name__ == "__main__":
    main()
