"""prepare_data: generate a RULER-format task with evidence spans into <paths.data_dir>/ruler_multihop/<length>/<task>/."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ctxbench.conf import to_plain
from ctxbench.datasets.resolve import RULER_SUBDIR, file_fingerprint
from ctxbench.datasets.ruler_gen import task_path, task_spec, write_task
from ctxbench.manifest import build_manifest, write_manifest
from ctxbench.models.causal_lm import load_tokenizer

log = logging.getLogger(__name__)


def prepare_stage(cfg: DictConfig, output_dir: str | Path) -> dict:
    paths = OmegaConf.to_object(cfg.paths)
    ds = OmegaConf.to_object(cfg.dataset)
    task_spec(ds.name)  # refuse an unknown task before loading anything
    root = Path(paths.data_dir) / RULER_SUBDIR
    target = task_path(root, ds.name, cfg.length)
    if target.exists() and not cfg.overwrite:
        log.info("%s exists; keeping it (overwrite=true regenerates)", target)
    else:
        tokenizer = load_tokenizer(OmegaConf.to_object(cfg.model), cache_dir=paths.cache_dir)
        target = write_task(root, ds.name, max_seq_length=cfg.length, tokenizer=tokenizer,
                            num_samples=cfg.num_samples, seed=cfg.seed, morehopqa_path=ds.morehopqa_path)
        log.info("wrote %d samples of %s at %d tokens to %s", cfg.num_samples, ds.name, cfg.length, target)
    manifest = build_manifest(to_plain(cfg), stage="prepare_data", root=paths.root,
                              dataset={"name": ds.name, "path": str(target), "sha256": file_fingerprint(target)})
    write_manifest(output_dir, manifest)
    return {"path": str(target)}
