"""The dataset interface (one class per kind, reached by ``_target_`` from ``conf/dataset/<name>.yaml``) and the loading
priority of the stages: a sampled cache ``<paths.samples_dir>/<name>.jsonl`` wins over the kind's raw data.

A new dataset kind is one subclass of ``Dataset`` (``raw_path`` and ``load_raw``) and one YAML file.
"""

from __future__ import annotations

import hashlib
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar, Optional

from ctxbench.core.errors import DataError
from ctxbench.example import CachedExample, read_examples
from ctxbench.core.part import Part, neutral
from ctxbench.core.cache_record import cache_mismatch

log = logging.getLogger(__name__)


@dataclass
class Paths:
    """Where the stages read and write (the ``paths`` config group): ``data_dir`` generated data, ``samples_dir`` the
    sampled CachedExample caches, ``model_cache_dir`` dequantised models and embeddings."""

    root: str = "."
    data_dir: str = "data"
    samples_dir: str = "exp/exp2/data"
    model_cache_dir: str = ".cache"


@dataclass(frozen=True)
class LoadedSource:
    """Where a stage's examples came from: ``kind`` is ``cache`` (a sampled cache) or the dataset kind's own."""

    name: str
    kind: str
    path: Path

    def record(self, n_examples: int) -> dict:
        return {"name": self.name, "kind": self.kind, "path": str(self.path), "sha256": file_fingerprint(self.path),
                "examples": n_examples}


@dataclass(kw_only=True)
class Dataset(Part, ABC):
    """``name`` names the dataset everywhere (output dirs, caches, reports). ``use_cache``: a sampled cache
    ``<samples_dir>/<name>.jsonl`` wins over the raw data (the sampling stage always reads the raw data)."""

    kind: ClassVar[str] = ""  # recorded in manifests
    name: str
    use_cache: bool = neutral(True)  # where the examples are read from, not what they are

    @abstractmethod
    def raw_path(self, paths: Paths, tokenizer=None) -> Path:
        """The file holding the raw data (a kind that can generate it does so here when it is missing)."""

    @abstractmethod
    def load_raw(self, path: Path, tokenizer=None, limit: Optional[int] = None) -> list[CachedExample]:
        """The examples of the raw file, the first ``limit`` of them when given (spans checked against ``tokenizer``
        when given); a kind whose conversion is costly converts only those, but checks every line."""

    def sampled_cache(self, paths: Paths) -> Path:
        return Path(paths.samples_dir) / f"{self.name}.jsonl"

    def load(self, paths: Paths, tokenizer=None, max_examples: Optional[int] = None, *,
             use_cache: Optional[bool] = None,
             model: Optional[dict] = None) -> tuple[LoadedSource, list[CachedExample]]:
        """The examples a stage runs on: the sampled cache when there is one made from this data (and for ``model``,
        the run's model config, when given), else the raw data. A cache made from other data (another length, data
        file or generation setting) or for another model's tokenizer never stands in for the data asked for: it is
        refused, naming what differs (``ctxbench.core.cache_record.cache_mismatch``)."""
        cache = self.sampled_cache(paths)
        if (self.use_cache if use_cache is None else use_cache) and cache.is_file():
            mismatch = cache_mismatch(cache, {f.name: getattr(self, f.name) for f in fields(self)}, model)
            if mismatch is not None:
                raise DataError(f"this sampled cache would stand in for dataset {self.name}, but it was made from "
                                f"other data or for another model: {mismatch}; run with the settings it was made "
                                f"with, or read the raw data with dataset.use_cache=false", file=cache)
            return self._loaded(LoadedSource(self.name, "cache", cache), read_examples(cache, tokenizer=tokenizer),
                                max_examples)
        path = self.raw_path(paths, tokenizer)
        return self._loaded(LoadedSource(self.name, self.kind, path), self.load_raw(path, tokenizer, max_examples),
                            max_examples)

    def _loaded(self, source: LoadedSource, examples, max_examples: Optional[int]):
        examples = list(examples)[:max_examples]
        log.info("dataset %s: %d examples from %s (%s)", self.name, len(examples), source.path,
                 "the sampled cache; dataset.use_cache=false reads the raw data instead" if source.kind == "cache"
                 else f"{source.kind} data")
        return source, examples


def file_fingerprint(path: str | Path) -> str:
    """sha256 of the file's bytes (provenance for run manifests and results)."""
    h = hashlib.sha256()
    with open(path, "rb") as fp:
        for block in iter(lambda: fp.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
