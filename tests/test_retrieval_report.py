"""Retrieval reports: the Markdown layout (sorted rows, bold column maxima, '-' and an empty average for a missing
cell), and the report command over a folder mixing retrieval and attribution jobs."""

import json

import pytest
from omegaconf import OmegaConf

from ctxbench.retrieval.report import RESULTS_JSON, retrieval_markdown, write_job_report
from ctxbench.stages.report import report_stage


def entry(model, reranker, dataset, split, **metrics):
    return {"model": model, "reranker": reranker, "dataset": dataset, "split": split, "column": f"{dataset}-{split}",
            "metrics": metrics, "n_queries": 3, "skipped": {}, "notes": []}


def test_markdown_layout():
    entries = [entry("random", "NoReranker", "b", "test", ndcg_at_10=0.1),
               entry("bm25", "NoReranker", "b", "test", ndcg_at_10=0.5),
               entry("bm25", "NoReranker", "a", "test", ndcg_at_10=0.25),
               entry("bm25", "ql", "a", "test", ndcg_at_10=0.75), entry("bm25", "ql", "b", "test", ndcg_at_10=0.125)]
    md = retrieval_markdown("t", entries, ["ndcg_at_10"]).splitlines()[2:]
    assert md[0] == "## NDCG@10 (ndcg_at_10, x100)"
    assert md[2] == "| Model | Reranker | average | a-test | b-test |"
    assert md[4:7] == ["| bm25 | NoReranker | 37.500 | 25.000 | **50.000** |",
                       "| bm25 | ql | **43.750** | **75.000** | 12.500 |",
                       "| random | NoReranker |  | - | 10.000 |"]


def test_report_command_mixes_retrieval_and_attribution_jobs(tmp_path):
    sweep = tmp_path / "multirun"
    for i, (model, task, recall) in enumerate([("bm25", "niah_single_1", 1.0), ("bm25", "vt_h2_c3", 0.5),
                                               ("dense:minilm", "niah_single_1", 0.75)]):
        job = sweep / f"{i}_retrieval"
        job.mkdir(parents=True)
        write_job_report(job, [entry(model, "NoReranker", task, "context", recall_at_10=recall, ndcg_at_10=recall / 2)],
                         ["ndcg_at_10", "recall_at_10"], {}, title="t")
        # as mode=retrieval writes it: a run_exp job, with retrieval data
        (job / "manifest.json").write_text(json.dumps({"stage": "run_exp", "config": {"dataset": {"name": task}},
                                                       "dataset": {"name": task, "kind": "retrieval"}}))
    for i, (task, rec) in enumerate([("niah_single_1", 0.4), ("vt_h2_c3", 0.2)]):
        job = sweep / f"{i + 3}_attribution"
        job.mkdir()
        (job / "manifest.json").write_text(json.dumps({"stage": "run_exp", "config": {"dataset": {"name": task}}}))
        (job / "summary.json").write_text(json.dumps({
            "methods": {"ifr_multi_hop": {"examples": 3, "recovery": {"seq": {"recall": {"mean": rec, "std": 0,
                                                                                         "n": 3}}}}},
            "scorers": {"recovery": {"title": "Recovery", "metrics": [
                {"key": "recall", "label": "Recall@10%", "higher_is_better": True}]}}}))
    out = tmp_path / "report"
    # hand-made summaries
    result = report_stage(OmegaConf.create({"runs": [str(sweep)], "view": "seq", "html": False}), out)
    md = (out / "retrieval_report.md").read_text()
    assert result["retrieval"] == str(out / "retrieval_report.md") and (out / "table1.md").is_file()
    assert "| Model | Reranker | average | niah_single_1-context | vt_h2_c3-context |" in md
    assert "| bm25 | NoReranker | **75.000** | **100.000** | **50.000** |" in md
    assert "| dense:minilm | NoReranker |  | 75.000 | - |" in md
    assert "| Method | Kind | Measure | average | niah_single_1 | vt_h2_c3 |" in md
    assert "| ifr_multi_hop | attribution (tokens, seq) | Recall@10% | 30.000 | 40.000 | 20.000 |" in md
    assert "| bm25 / NoReranker | retrieval (sentences) | Recall@10 | **75.000** | **100.000** | **50.000** |" in md
    # retrieval jobs alone make a report too; the same cell from two jobs is refused
    only = tmp_path / "only"
    only.mkdir()
    for name in ("0_retrieval", "1_retrieval"):
        (only / name).mkdir()
        for f in (RESULTS_JSON, "manifest.json"):
            (only / name / f).write_text((sweep / "0_retrieval" / f).read_text())
    with pytest.raises(ValueError, match="two runs give bm25 / NoReranker on niah_single_1-context"):
        report_stage(OmegaConf.create({"runs": [str(only)], "view": "seq"}), tmp_path / "r2")
    report_stage(OmegaConf.create({"runs": [str(only / "0_retrieval")], "view": "seq"}), tmp_path / "r3")
    assert (tmp_path / "r3" / "retrieval_report.md").is_file() and not (tmp_path / "r3" / "table1.md").exists()
