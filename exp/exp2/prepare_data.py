"""Generate RULER-format data with evidence spans: `python exp/exp2/prepare_data.py dataset=niah_mq_q2 length=1024`."""

from ctxbench.stages.entry import hydra_entry

main = hydra_entry(__file__, "prepare", "ctxbench.stages.prepare:prepare_stage")

if __name__ == "__main__":
    main()
