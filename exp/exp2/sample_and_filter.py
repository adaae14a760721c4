"""Stage 1: sample "chain of thought + \\box{answer}", keep judged-correct answers, cache them with token spans."""

import hydra
from omegaconf import DictConfig

from ctxbench.conf import register_configs
from ctxbench.stages.entry import run_entry

register_configs()


@hydra.main(version_base="1.3", config_path="../../conf", config_name="sample")
def main(cfg: DictConfig):
    from ctxbench.stages.sample import sample_stage

    return run_entry(sample_stage, cfg)


if __name__ == "__main__":
    main()
