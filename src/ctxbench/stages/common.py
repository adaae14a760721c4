"""Pieces every stage wires the same way: dataset resolution and loading, the run manifest."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional

from ctxbench.conf import DatasetConfig, PathsConfig
from ctxbench.datasets import load_source, resolve_dataset
from ctxbench.datasets.resolve import DatasetSource, file_fingerprint
from ctxbench.errors import UnknownDatasetError
from ctxbench.example import CachedExample
from ctxbench.manifest import build_manifest, write_manifest

log = logging.getLogger(__name__)


def resolve(ds: DatasetConfig, paths: PathsConfig, tokenizer=None) -> DatasetSource:
    """Resolve the dataset; a missing generated RULER task is generated first when ``generate_missing`` is on."""
    kwargs = dict(kind=ds.kind, data_dir=paths.data_dir, cache_dir=paths.exp_data_dir, path=ds.path,
                  length=ds.length, use_cache=ds.use_cache)
    try:
        return resolve_dataset(ds.name, **kwargs)
    except UnknownDatasetError:
        if not (ds.generate_missing and ds.kind == "ruler" and ds.length is not None):
            raise
    from ctxbench.datasets.ruler_gen import write_task

    log.info("generating %s at length %d (%d samples): it was missing", ds.name, ds.length, ds.num_samples)
    write_task(Path(paths.data_dir) / "ruler_multihop", ds.name, max_seq_length=ds.length,
               num_samples=ds.num_samples, seed=ds.generation_seed, tokenizer=tokenizer,
               morehopqa_path=ds.morehopqa_path)
    return resolve_dataset(ds.name, **kwargs)


def load_examples(ds: DatasetConfig, paths: PathsConfig, tokenizer=None,
                  max_examples: Optional[int] = None) -> tuple[DatasetSource, list[CachedExample]]:
    source = resolve(ds, paths, tokenizer)
    examples = load_source(source, tokenizer=tokenizer)
    if max_examples is not None:
        examples = examples[:max_examples]
    log.info("dataset %s: %d examples from %s (%s)", ds.name, len(examples), source.path, source.kind)
    return source, examples


def source_record(source: DatasetSource, n_examples: int) -> dict[str, Any]:
    return {"name": source.name, "kind": source.kind, "path": str(source.path),
            "sha256": file_fingerprint(source.path), "examples": n_examples}


def write_run_manifest(output_dir: str | Path, config: dict[str, Any], *, stage: str, root: str | Path,
                       source: DatasetSource, n_examples: int, extra: Optional[dict[str, Any]] = None) -> Path:
    manifest = build_manifest(config, stage=stage, root=root, dataset=source_record(source, n_examples), extra=extra)
    return write_manifest(output_dir, manifest)
