"""Dataset name -> source, and the loading priority of run_exp: sampled cache > explicit JSONL path > raw parse."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ctxbench.datasets.ruler_gen import TASKS as RULER_TASKS
from ctxbench.errors import UnknownDatasetError

REFUSED = {"math": "the reference's math dataset has no evidence spans or RULER format and is not supported"}
RULER_SUBDIR = "ruler_multihop"


@dataclass(frozen=True)
class DatasetSource:
    """What to load: ``kind`` is ``cache`` (CachedExample JSONL), ``ruler`` (RULER JSONL) or ``morehopqa`` (JSON)."""

    name: str
    kind: str
    path: Path


def ruler_task_files(data_dir: str | Path, task: str) -> dict[int, Path]:
    """``{length: path}`` of every ``<data_dir>/ruler_multihop/<length>/<task>/validation.jsonl`` present."""
    root = Path(data_dir) / RULER_SUBDIR
    found = {}
    if root.is_dir():
        for length_dir in root.iterdir():
            f = length_dir / task / "validation.jsonl"
            if length_dir.name.isdigit() and f.is_file():
                found[int(length_dir.name)] = f
    return dict(sorted(found.items()))


def available_datasets(data_dir: str | Path, cache_dir: str | Path) -> list[str]:
    names = {"morehopqa", "jsonl", *RULER_TASKS}
    root = Path(data_dir) / RULER_SUBDIR
    if root.is_dir():
        names.update(p.parent.name for p in root.glob("*/*/validation.jsonl"))
    if Path(cache_dir).is_dir():
        names.update(p.stem for p in Path(cache_dir).glob("*.jsonl"))
    return sorted(names)


def resolve_dataset(name: str, *, kind: str, data_dir: str | Path, cache_dir: str | Path,
                    path: Optional[str | Path] = None, length: Optional[int] = None,
                    use_cache: bool = True) -> DatasetSource:
    """Pick the source for dataset ``name``.

    ``kind``: ``morehopqa`` (raw = the JSON at ``path``), ``ruler`` (raw = the task folder for ``length``, or the single
    length present) or ``jsonl`` (raw = the RULER JSONL at ``path``). A sampled cache ``<cache_dir>/<name>.jsonl`` wins when
    ``use_cache``; then an explicit ``.jsonl`` path; then the raw data.
    """
    if name in REFUSED:
        raise UnknownDatasetError(f"dataset '{name}' is refused: {REFUSED[name]}. "
                                  f"Available: {', '.join(available_datasets(data_dir, cache_dir))}")
    cache = Path(cache_dir) / f"{name}.jsonl"
    if use_cache and cache.is_file():
        return DatasetSource(name, "cache", cache)
    if path is not None and str(path).endswith(".jsonl"):
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"dataset.path={path}: no such JSONL file")
        return DatasetSource(name, "ruler", p)
    if kind == "morehopqa":
        if path is None:
            raise ValueError("dataset.path must point at the MoreHopQA JSON file")
        return DatasetSource(name, "morehopqa", Path(path))
    if kind == "jsonl":
        raise ValueError(f"dataset '{name}': set dataset.path to a RULER-format .jsonl file")
    if kind != "ruler":
        raise ValueError(f"dataset '{name}': unknown kind {kind!r} (expected morehopqa, ruler or jsonl)")
    files = ruler_task_files(data_dir, name)
    if length is not None:
        if length in files:
            return DatasetSource(name, "ruler", files[length])
        raise UnknownDatasetError(
            f"dataset '{name}' at length {length}: {Path(data_dir) / RULER_SUBDIR / str(length) / name / 'validation.jsonl'}"
            f" does not exist (lengths present: {sorted(files) or 'none'}); generate it with "
            f"`python exp/exp2/prepare_data.py dataset={name} length={length}`")
    if len(files) == 1:
        return DatasetSource(name, "ruler", next(iter(files.values())))
    if len(files) > 1:
        raise UnknownDatasetError(f"dataset '{name}' exists at several lengths {sorted(files)}: set dataset.length")
    raise UnknownDatasetError(
        f"dataset '{name}' not found: no cache {cache}, no {Path(data_dir) / RULER_SUBDIR}/<length>/{name}/validation.jsonl. "
        f"Available: {', '.join(available_datasets(data_dir, cache_dir))}")


def file_fingerprint(path: str | Path) -> str:
    """sha256 of the file's bytes (provenance for run manifests and results)."""
    h = hashlib.sha256()
    with open(path, "rb") as fp:
        for block in iter(lambda: fp.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
