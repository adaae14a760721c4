"""What the in-context retrievers read of a MoreHopQA query: the whole prompt (``fields: [prompt]``, before issue 35)
or the question first (``[question, context]``, the default now), with the shipped pool and the offline MiniLM.

    .venv/bin/python bench/bench_icl_fields.py [--ice-num 4]

Printed, for the 150 packaged MoreHopQA rows as queries against the box pool: how many prompts the 256-token encoder
cuts before their question; how many distinct query texts and embeddings each reading gives; how many rows share
their embedding with another row (their examples then fall to the tie order); and how many rows' dense / BM25
selections change between the two readings.
"""

from __future__ import annotations

import argparse
from collections import Counter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ice-num", type=int, default=4)
    args = ap.parse_args()

    import numpy as np

    from ctxbench.datasets.morehopqa import load_morehopqa, morehopqa_sample
    from ctxbench.models.embedder import Embedder
    from ctxbench.retrievers.base import row_text
    from ctxbench.retrievers.bm25 import BM25Retriever
    from ctxbench.retrievers.dense import DenseRetriever
    from ctxbench.retrievers.pool import example_rows, load_pool

    rows = example_rows(load_morehopqa(morehopqa_sample()))
    pool = load_pool()
    emb = Embedder().load()
    tok = emb.tokenizer
    limit = emb.query_max_length
    cut = sum(len(tok(r["prompt"], add_special_tokens=True)["input_ids"]) > limit
              and len(tok(r["context"], add_special_tokens=True)["input_ids"]) + 1 >= limit for r in rows)
    print(f"queries: {len(rows)} MoreHopQA rows; pool: {len(pool)} box rows; encoder limit {limit} tokens")
    print(f"prompts cut by the encoder before their question: {cut}")
    readings = {"prompt": ["prompt"], "question,context": ["question", "context"]}
    picks = {}
    for name, fields in readings.items():
        texts = [row_text(r, fields) for r in rows]
        vecs = emb.encode_queries(texts)
        keys = [v.round(5).tobytes() for v in vecs]
        shared = sum(c for c in Counter(keys).values() if c > 1)
        print(f"[{name}] distinct texts {len(set(texts))}, distinct embeddings {len(set(keys))}, "
              f"rows sharing their embedding with another row {shared}")
        for kind, r in (("dense", DenseRetriever(ice_num=args.ice_num, fields=fields, embedder=emb)),
                        ("bm25", BM25Retriever(ice_num=args.ice_num, fields=fields))):
            picks[name, kind] = [h.indices for h in r.fit(pool).retrieve(rows)]
    for kind in ("dense", "bm25"):
        a, b = picks["prompt", kind], picks["question,context", kind]
        changed = sum(x != y for x, y in zip(a, b))
        overlap = np.mean([len(set(x) & set(y)) / max(1, len(x)) for x, y in zip(a, b)])
        print(f"{kind} top-{args.ice_num}: selection changed on {changed}/{len(rows)} rows, "
              f"mean overlap {overlap:.2f}")


if __name__ == "__main__":
    main()
