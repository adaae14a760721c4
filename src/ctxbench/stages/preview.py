"""preview_prompts: what the sampling stage would send the model for the first ``n`` rows of a dataset.

For each row: the retrieved pool ids (with indices and scores), the chat messages and the text the tokenizer's chat
template makes of them (the plain prompt for models without one; the messages alone for an OpenAI-compatible endpoint).
Printed, and written as JSON lines to ``output`` when set. Only the tokenizer is loaded, unless the retriever scores
with the causal LM (mdl).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from ctxbench.core.errors import ConfigError
from ctxbench.utils.files import atomic_write_text
from ctxbench.stages.conf import PreviewConfig
from ctxbench.core.part import check_stage_config
from ctxbench.core.part import build
from ctxbench.retrievers.few_shot import few_shot_prompts
from ctxbench.prompts.icl import ICLTemplate
from ctxbench.retrievers.base import Retriever
from ctxbench.retrievers.pool import example_rows, load_pool
from ctxbench.stages.common import build_dataset, build_template, stage_paths

log = logging.getLogger(__name__)


def preview_records(retriever: Retriever, template: ICLTemplate, pool: list[dict], rows: list[dict], tokenizer=None,
                    chat_endpoint: bool = False) -> list[dict[str, Any]]:
    """Fit ``retriever`` on ``pool``, retrieve for ``rows`` and render each prompt (library entry of the command)."""
    retriever.fit(pool)
    return [{"id": row["id"],
             "retrieved": [{"index": i, "id": pid, "score": s}
                           for i, pid, s in zip(fp.hits.indices, fp.ids, fp.hits.scores)],
             "n_examples": fp.n_examples, "messages": fp.prompt.messages, "text": fp.prompt.text}
            for row, fp in zip(rows, few_shot_prompts(retriever, template, pool, rows, tokenizer, chat_endpoint))]


def format_record(rec: dict[str, Any]) -> str:
    lines = [f"=== {rec['id']}: {rec['n_examples']} example(s): "
             + (", ".join(f"{r['id']} ({r['score']:.4g})" for r in rec["retrieved"]) or "none")]
    if rec["messages"] is not None:
        for m in rec["messages"]:
            lines.append(f"--- {m['role']}")
            lines.append(m["content"])
        lines.append("--- text sent (chat template applied)")
    else:
        lines.append("--- text sent")
    lines.append(rec["text"])
    return "\n".join(lines)


def preview_stage(cfg: DictConfig, output_dir: str | Path) -> dict:
    from ctxbench.models.causal_lm import load_causal_lm, load_tokenizer

    check_stage_config(cfg, PreviewConfig)
    paths = stage_paths(cfg)
    dataset = build_dataset(cfg)
    retriever = build(cfg.retriever, "retriever", Retriever)
    template = build_template(cfg)
    model_cfg = OmegaConf.to_object(cfg.model)
    local = model_cfg.backend == "hf"
    tokenizer = None
    if local and retriever.needs_lm:
        loaded = load_causal_lm(model_cfg, cache_dir=paths.model_cache_dir)
        tokenizer = loaded.tokenizer
        retriever.use_lm(loaded)
    elif local:
        tokenizer = load_tokenizer(model_cfg, cache_dir=paths.model_cache_dir)
    retriever.use_template(template)
    pool = load_pool(cfg.pool)
    _, examples = dataset.load(paths, tokenizer, cfg.n, use_cache=False)
    try:
        records = preview_records(retriever, template, pool, example_rows(examples), tokenizer,
                                  chat_endpoint=not local)
    except ValueError as exc:
        raise ConfigError(f"retriever: {exc}") from exc
    for rec in records:
        print(format_record(rec), end="\n\n")
    written: Optional[str] = None
    if cfg.output:
        written = str(atomic_write_text(cfg.output, "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                                            for r in records)))
        log.info("wrote %d rows to %s", len(records), written)
    return {"rows": len(records), "output": written}
