"""How often retriever=bm25 and retriever=bm25_opencompass choose what OpenCompass's BM25Retriever chooses.

    .venv/bin/python bench/bench_bm25_opencompass.py
    # against OpenCompass's own class too: run it with an interpreter where `opencompass` imports (docs/retrievers.md)

Pool: the shipped box pool (31 worked examples); queries: the 150 packaged MoreHopQA rows and the pool's own rows. For
each reading of the rows (fields [prompt], the default before issue 35; [question, context], the default now) and
ice_num 1 and 4, the share of queries whose selection equals OpenCompass's, as an ordered list and as a set.
OpenCompass's procedure is written out with the libraries it calls (rank_bm25's BM25Okapi over NLTK Treebank tokens,
np.argsort(scores)[::-1]); where OpenCompass imports, its BM25Retriever class itself is run as well, with NLTK's
word_tokenize swapped for the Treebank rules it applies per sentence (its Punkt model is a download).
"""

from __future__ import annotations


def opencompass_procedure(pool_texts, query_texts, ice_num):
    import numpy as np
    from nltk.tokenize import NLTKWordTokenizer
    from rank_bm25 import BM25Okapi

    rules = NLTKWordTokenizer()
    bm25 = BM25Okapi([rules.tokenize(t) for t in pool_texts])
    return [[int(i) for i in np.argsort(bm25.get_scores(rules.tokenize(q)))[::-1][:ice_num]] for q in query_texts]


def opencompass_class(pool_texts, query_texts, ice_num):
    """OpenCompass's BM25Retriever on a two-split dataset of one text column; None where opencompass does not import."""
    try:
        from opencompass.openicl.icl_dataset_reader import DatasetReader
        from opencompass.openicl.icl_retriever import icl_bm25_retriever
    except ImportError:
        return None
    from types import SimpleNamespace

    from datasets import Dataset, DatasetDict
    from nltk.tokenize import NLTKWordTokenizer

    icl_bm25_retriever.word_tokenize = NLTKWordTokenizer().tokenize
    data = DatasetDict({"train": Dataset.from_dict({"text": pool_texts, "label": [""] * len(pool_texts)}),
                        "test": Dataset.from_dict({"text": query_texts, "label": [""] * len(query_texts)})})
    reader = DatasetReader(data, input_columns=["text"], output_column="label")
    wrapped = SimpleNamespace(reader=reader, train=reader.dataset["train"], test=reader.dataset["test"])
    return icl_bm25_retriever.BM25Retriever(wrapped, ice_num=ice_num).retrieve()


def main() -> None:
    import logging

    from ctxbench.datasets.morehopqa import load_morehopqa, morehopqa_sample
    from ctxbench.retrievers.base import row_text
    from ctxbench.retrievers.bm25 import BM25Retriever
    from ctxbench.retrievers.pool import example_rows, load_pool

    logging.disable(logging.INFO)
    pool = load_pool()
    queries = example_rows(load_morehopqa(morehopqa_sample())) + [dict(p, id=f"q-{p['id']}") for p in pool]
    compat = dict(tokenizer="nltk_treebank", stopwords=None, method="okapi_rank_bm25", ties="opencompass")
    print(f"pool {len(pool)} rows, {len(queries)} queries; agreement with OpenCompass: ordered list / set")
    for fields in (["prompt"], ["question", "context"]):
        p_texts = [row_text(p, fields) for p in pool]
        q_texts = [row_text(q, fields) for q in queries]
        for k in (1, 4):
            ref = opencompass_procedure(p_texts, q_texts, k)
            cls = opencompass_class(p_texts, q_texts, k)
            line = f"fields={fields} ice_num={k}:"
            if cls is not None:
                line += f" [OpenCompass's class = its procedure on {sum(a == b for a, b in zip(cls, ref))}/{len(ref)}]"
            for name, kw in (("bm25", {}), ("bm25_opencompass", compat)):
                got = [h.indices for h in BM25Retriever(ice_num=k, fields=fields, **kw).fit(pool).retrieve(queries)]
                same = sum(g == r for g, r in zip(got, ref)) / len(ref)
                same_set = sum(set(g) == set(r) for g, r in zip(got, ref)) / len(ref)
                line += f"  {name} {same:.1%} / {same_set:.1%}"
            print(line)


if __name__ == "__main__":
    main()
