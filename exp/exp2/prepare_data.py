"""Generate RULER-format data with evidence spans: `python exp/exp2/prepare_data.py dataset=niah_mq_q2 length=1024`."""

import hydra
from omegaconf import DictConfig

from ctxbench.conf import register_configs
from ctxbench.stages.entry import run_entry

register_configs()


@hydra.main(version_base="1.3", config_path="../../conf", config_name="prepare")
def main(cfg: DictConfig):
    from ctxbench.stages.prepare import prepare_stage

    return run_entry(prepare_stage, cfg)


if __name__ == "__main__":
    main()
