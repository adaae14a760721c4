"""Stage 1: sample "chain of thought + \\box{answer}", keep judged-correct answers, cache them with token spans."""

from ctxbench.stages.entry import hydra_entry

main = hydra_entry(__file__, "sample", "ctxbench.stages.sample:sample_stage")

if __name__ == "__main__":
    main()
