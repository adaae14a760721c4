"""Pieces every stage wires the same way: the paths, the dataset part, the run manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from ctxbench.datasets.base import Dataset, LoadedSource, Paths
from ctxbench.manifest import build_manifest, write_manifest
from ctxbench.parts import build


def stage_paths(cfg: DictConfig) -> Paths:
    return OmegaConf.to_object(cfg.paths)


def build_dataset(cfg: DictConfig) -> Dataset:
    return build(cfg.dataset, "dataset", Dataset)


def write_run_manifest(output_dir: str | Path, config: dict[str, Any], *, stage: str, root: str | Path,
                       source: LoadedSource, n_examples: int, extra: Optional[dict[str, Any]] = None) -> Path:
    manifest = build_manifest(config, stage=stage, root=root, dataset=source.record(n_examples), extra=extra)
    return write_manifest(output_dir, manifest)
