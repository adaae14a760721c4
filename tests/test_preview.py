"""preview_prompts: rendered prompts and retrieved ids of the first rows, printed and written as JSONL; only the
tokenizer is loaded unless the retriever needs the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxbench.datasets.morehopqa import load_morehopqa
from ctxbench.core.errors import ConfigError
from ctxbench.prompts.icl import BOX_SYSTEM_PROMPT, box_template
from ctxbench.core.part import build
from ctxbench.retrievers.base import Retriever
from ctxbench.retrievers.bm25 import BM25Retriever
from ctxbench.retrievers.fixk import FixKRetriever
from ctxbench.retrievers.pool import example_rows, load_pool
from ctxbench.stages.preview import format_record, preview_records

from helpers.cli import run_script
from helpers.configs import compose_stage
from helpers.paths import CACHE_DIR, CONF


def test_preview_records_on_morehopqa(morehopqa_path):
    pool = load_pool()
    rows = example_rows(load_morehopqa(morehopqa_path)[:3])
    recs = preview_records(BM25Retriever(ice_num=2), box_template(), pool, rows)
    assert [r["id"] for r in recs] == [r["id"] for r in rows]
    for rec, row in zip(recs, rows):
        assert rec["n_examples"] == 2 and rec["messages"] is None  # no tokenizer: the plain text
        ids = [h["id"] for h in rec["retrieved"]]
        assert all(pool[h["index"]]["id"] == h["id"] for h in rec["retrieved"])
        first = pool[rec["retrieved"][0]["index"]]
        assert rec["text"].startswith(BOX_SYSTEM_PROMPT + "\n" + first["prompt"] + "\n" + first["response"])
        assert rec["text"].endswith(row["prompt"]) and len(set(ids)) == 2
        shown = format_record(rec)
        assert shown.startswith(f"=== {row['id']}: 2 example(s): {ids[0]}") and row["prompt"] in shown
    chat = preview_records(FixKRetriever(fix_id_list=[0]), box_template(), pool, rows[:1], chat_endpoint=True)[0]
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "user"]


def _cfg(*overrides):
    return compose_stage("preview", f"paths.root={Path.cwd()}", f"paths.model_cache_dir={CACHE_DIR}", *overrides)


def test_preview_config_composes_with_every_retriever():
    options = sorted(p.stem for p in (CONF / "retriever").glob("*.yaml"))
    assert len(options) >= 10
    for name in options:
        cfg = _cfg(f"retriever={name}", "n=2")
        part = build(cfg.retriever, "retriever", Retriever)  # instantiated (models load lazily, not here)
        assert type(part).__module__.startswith("ctxbench.retrievers.")
        if hasattr(part, "embedder"):
            assert part.embedder.cache_dir == str(CACHE_DIR) and part.embedder._model is None
    cfg = _cfg("template.ice_token=@@", "template.answer_field=response")
    assert cfg.template.ice_token == "@@"
    with pytest.raises(Exception, match="ice_tokn"):
        _cfg("template.ice_tokn=x")


@pytest.mark.slow
def test_preview_stage_loads_only_the_tokenizer(tmp_path, monkeypatch):
    from ctxbench.models import causal_lm
    from ctxbench.stages.preview import preview_stage

    def no_model(*a, **k):
        raise AssertionError("the preview loaded the model")

    monkeypatch.setattr(causal_lm, "load_causal_lm", no_model)
    out = tmp_path / "rows.jsonl"
    res = preview_stage(_cfg("dataset=morehopqa", "retriever=bm25", "n=2", f"output={out}"), str(tmp_path))
    assert res["rows"] == 2
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(recs) == 2 and all(len(r["retrieved"]) == 4 for r in recs)
    assert recs[0]["messages"][0] == {"role": "system", "content": BOX_SYSTEM_PROMPT}
    assert recs[0]["text"].startswith("<|im_start|>system\n") and recs[0]["text"].endswith("<|im_start|>assistant\n")
    with pytest.raises(ConfigError, match="n=0"):
        preview_stage(_cfg("n=0"), str(tmp_path))
    with pytest.raises(ConfigError, match="template"):
        preview_stage(_cfg("template.ice_token=null"), str(tmp_path))
    with pytest.raises(ConfigError, match="retriever: .*fix_id_list index 40 is out of range of \\[0, 31\\)"):
        preview_stage(_cfg("retriever=fixk", "retriever.fix_id_list=[0,40]"), str(tmp_path))


@pytest.mark.slow
def test_preview_command_line(tmp_path):
    out = tmp_path / "rows.jsonl"
    proc = run_script("preview_prompts.py", "dataset=morehopqa", "retriever=bm25", "n=2", f"output={out}",
                      f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("=== ") == 2 and "--- text sent (chat template applied)" in proc.stdout
    assert "<|im_start|>assistant" in proc.stdout and len(out.read_text().splitlines()) == 2
    bad = run_script("preview_prompts.py", "retriever=random", "retriever.ice_num=99",
                     f"hydra.run.dir={tmp_path / 'run2'}", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: retriever: ice_num=99")
