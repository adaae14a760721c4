"""Show the prompts the sampling stage would send:
`python exp/exp2/preview_prompts.py dataset=morehopqa retriever=bm25 n=3` (`output=rows.jsonl` also writes them as
JSON lines). docs/retrievers.md#preview_prompts"""

from ctxbench.stages.entry import hydra_entry

main = hydra_entry(__file__, "preview", "ctxbench.stages.preview:preview_stage")

if __name__ == "__main__":
    main()
