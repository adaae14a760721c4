"""Stage 2: attribution experiment. `python exp/exp2/run_exp.py --help` lists the config groups."""

from ctxbench.stages.entry import hydra_entry

main = hydra_entry(__file__, "run", "ctxbench.stages.run:run_stage")

if __name__ == "__main__":
    main()
