"""Stage 1, sample_and_filter: generate, check the format, judge, cache CachedExample rows."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ctxbench.conf import to_plain
from ctxbench.errors import NotYetImplementedError
from ctxbench.models import load_causal_lm
from ctxbench.stages.common import build_dataset, stage_paths, write_run_manifest

log = logging.getLogger(__name__)


def sample_stage(cfg: DictConfig, output_dir: str | Path) -> dict:
    paths = stage_paths(cfg)
    dataset = build_dataset(cfg)
    model_cfg = OmegaConf.to_object(cfg.model)
    loaded = load_causal_lm(model_cfg, cache_dir=paths.model_cache_dir) if model_cfg.backend == "hf" else None
    tokenizer = loaded.tokenizer if loaded else None
    # Sampling reads the raw data, never a cache of its own output.
    source, examples = dataset.load(paths, tokenizer, cfg.max_examples, use_cache=False)
    write_run_manifest(output_dir, to_plain(cfg), stage="sample_and_filter", root=paths.root, source=source,
                       n_examples=len(examples))
    if cfg.dry_run:
        log.info("dry run: configuration composed, %d examples loaded, model %s; nothing generated",
                 len(examples), "loaded" if loaded else f"endpoint {model_cfg.base_url}")
        return {"dry_run": True, "examples": len(examples)}
    raise NotYetImplementedError("sample_and_filter: generation, judging and caching are not implemented yet "
                                 "(dry_run=true checks the set-up)")
