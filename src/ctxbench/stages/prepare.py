"""prepare_data: generate a RULER task with evidence spans (the dataset's own length, num_samples and seed)."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ctxbench.stages.conf import to_plain
from ctxbench.datasets.base import file_fingerprint
from ctxbench.datasets.ruler_task import RulerTask
from ctxbench.core.errors import ConfigError
from ctxbench.jobs.manifest import build_manifest, write_manifest
from ctxbench.models.causal_lm import load_tokenizer
from ctxbench.stages.common import build_dataset, check_length, stage_paths
from ctxbench.stages.jobdir import accept as accept_job

log = logging.getLogger(__name__)


def prepare_stage(cfg: DictConfig, output_dir: str | Path) -> dict:
    paths = stage_paths(cfg)
    ds = build_dataset(cfg)
    if not isinstance(ds, RulerTask):
        raise ConfigError(f"dataset: prepare_data generates RULER tasks; {ds.name!r} is a {ds.kind} dataset")
    check_length(ds, OmegaConf.to_object(cfg.model), paths.model_cache_dir)
    target = ds.file(paths)
    if target.exists() and not cfg.overwrite:
        log.info("%s exists; keeping it (overwrite=true regenerates)", target)
    else:
        target = ds.generate(paths, load_tokenizer(OmegaConf.to_object(cfg.model), cache_dir=paths.model_cache_dir))
        log.info("wrote %d samples of %s at %d tokens to %s", ds.num_samples, ds.name, ds.length, target)
    manifest = build_manifest(to_plain(cfg), stage="prepare_data", root=paths.root, output_dir=output_dir,
                              dataset={"name": ds.name, "path": str(target), "sha256": file_fingerprint(target)})
    accept_job()  # the first write into the job folder (ctxbench.stages.jobdir)
    write_manifest(output_dir, manifest)
    return {"path": str(target)}
