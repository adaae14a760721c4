"""Stage 2, run_exp: load examples, attribute, score, write results."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ctxbench.conf import to_plain
from ctxbench.errors import NotYetImplementedError
from ctxbench.models import load_causal_lm
from ctxbench.models.causal_lm import load_tokenizer
from ctxbench.stages.common import load_examples, write_run_manifest

log = logging.getLogger(__name__)


def run_stage(cfg: DictConfig, output_dir: str | Path) -> dict:
    paths = OmegaConf.to_object(cfg.paths)
    model_cfg = OmegaConf.to_object(cfg.model)
    tokenizer = load_tokenizer(model_cfg, cache_dir=paths.cache_dir)
    source, examples = load_examples(OmegaConf.to_object(cfg.dataset), paths, tokenizer, cfg.max_examples)
    loaded = load_causal_lm(model_cfg, need_attentions=True, cache_dir=paths.cache_dir)
    log.info("model %s loaded on %s (%s)", model_cfg.name, loaded.device, loaded.model.dtype)
    write_run_manifest(output_dir, to_plain(cfg), stage="run_exp", root=paths.root, source=source,
                       n_examples=len(examples))
    if cfg.dry_run:
        log.info("dry run: configuration composed, %d examples loaded, model loaded; no attribution was run",
                 len(examples))
        return {"dry_run": True, "examples": len(examples)}
    raise NotYetImplementedError("run_exp: attribution and scoring are not implemented yet (dry_run=true checks the set-up)")
