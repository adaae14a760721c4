"""Pieces every stage wires the same way: the paths, the dataset part, the run manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from ctxbench.datasets.base import Dataset, LoadedSource, Paths
from ctxbench.core.errors import ConfigError
from ctxbench.jobs.manifest import build_manifest, write_manifest
from ctxbench.models.causal_lm import max_positions
from ctxbench.core.part import build
from ctxbench.prompts.icl import ICLTemplate


def stage_paths(cfg: DictConfig) -> Paths:
    return OmegaConf.to_object(cfg.paths)


def build_dataset(cfg: DictConfig) -> Dataset:
    return build(cfg.dataset, "dataset", Dataset)


def check_length(dataset: Dataset, model_cfg: Any, cache_dir: Optional[str | Path]) -> None:
    """Refuse, before any data is generated or read and before the model loads, a dataset ``length`` beyond the
    model's positions, in one line naming both numbers (a generated task at 100k tokens for an 8k model would only
    be refused example by example, after minutes of generation)."""
    length = getattr(dataset, "length", None)
    if length is None:
        return
    limit = max_positions(model_cfg, cache_dir)
    if limit is not None and int(length) > limit:
        raise ConfigError(f"length={length}: more than model {model_cfg.name}'s {limit:,} positions "
                          f"(config.max_position_embeddings); use length<={limit}")


def write_run_manifest(output_dir: str | Path, config: dict[str, Any], *, stage: str, root: str | Path,
                       source: LoadedSource, n_examples: int, extra: Optional[dict[str, Any]] = None,
                       refresh: bool = False) -> Path:
    """The job's manifest (``jobs.manifest.write_manifest``: kept when only its time and commit would change, unless
    ``refresh``)."""
    manifest = build_manifest(config, stage=stage, root=root, output_dir=output_dir,
                              dataset=source.record(n_examples), extra=extra)
    return write_manifest(output_dir, manifest, refresh=refresh)


def build_template(cfg: DictConfig) -> ICLTemplate:
    """The ``template`` node as an ICLTemplate; its own checks become a ConfigError naming the key."""
    try:
        t = OmegaConf.to_object(cfg.template)
    except Exception as exc:  # the template's checks (ValueError) arrive wrapped by OmegaConf
        raise ConfigError(f"template: {getattr(exc, '__cause__', None) or exc}") from exc
    return t if isinstance(t, ICLTemplate) else ICLTemplate(**t)
