"""Aggregate run_exp jobs into one table: `python exp/exp2/report.py 'runs=[outputs/multirun/run_exp/<time>]'`."""

from ctxbench.stages.entry import hydra_entry

main = hydra_entry(__file__, "report", "ctxbench.stages.report:report_stage")

if __name__ == "__main__":
    main()
