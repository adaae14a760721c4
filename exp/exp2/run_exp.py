"""Stage 2: attribution experiment. `python exp/exp2/run_exp.py --help` lists the config groups."""

import hydra
from omegaconf import DictConfig

from ctxbench.conf import register_configs
from ctxbench.stages.entry import run_entry

register_configs()


@hydra.main(version_base="1.3", config_path="../../conf", config_name="run")
def main(cfg: DictConfig):
    from ctxbench.stages.run import run_stage

    return run_entry(run_stage, cfg)


if __name__ == "__main__":
    main()
