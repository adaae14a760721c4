"""RULER-format data as dataset kinds: a generated task (``RulerTask``, made on demand) or any RULER JSONL file
(``RulerJsonl``). Format and generation: docs/data.md and docs/ruler.md."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

from ctxbench.datasets.base import Dataset, Paths
from ctxbench.datasets.morehopqa import morehopqa_sample
from ctxbench.datasets.ruler import load_ruler_jsonl
from ctxbench.datasets.ruler_gen import TASKS, task_path, task_spec, write_task
from ctxbench.core.errors import DataError, UnknownDatasetError
from ctxbench.example import CachedExample
from ctxbench.utils.locks import create_once
from ctxbench.core.part import neutral, param

log = logging.getLogger(__name__)

RULER_SUBDIR = "ruler_multihop"


def ruler_lengths(data_dir: str | Path, task: str) -> list[int]:
    """The lengths at which ``<data_dir>/ruler_multihop/<length>/<task>/validation.jsonl`` exists."""
    root = Path(data_dir) / RULER_SUBDIR
    if not root.is_dir():
        return []
    return sorted(int(d.name) for d in root.iterdir() if d.name.isdigit() and (d / task / "validation.jsonl").is_file())


RULER_MAX_LENGTH = 131072


@dataclass(kw_only=True)
class RulerTask(Dataset):
    """A RULER task generated offline with evidence spans, at ``<data_dir>/ruler_multihop/<length>/<name>/``.

    ``length``: the maximum sequence length the samples are fitted to (the paper's 1,024; the dataset YAMLs take the
    run's top-level ``length``, which the quick default job sets to 512); ``num_samples`` and ``seed``: what generation
    makes; ``generate_missing``: generate a missing file before loading it instead of refusing; ``morehopqa_path``: the
    MoreHopQA-format source of ``hotpotqa_long``'s documents (None = the packaged 150-row sample).
    """

    kind: ClassVar[str] = "ruler"
    # the generator's sanity bound: RULER's longest standard length (its run scripts' largest SEQ_LENGTHS, 128K);
    # the model's own positions are checked before generation too (ctxbench.stages.common.check_length)
    length: int = param(1024, ge=1, le=RULER_MAX_LENGTH)
    # rows are made one by one from (seed, task, index): row i never depends on it
    num_samples: int = neutral(500, ge=1)
    seed: int = 42
    generate_missing: bool = neutral(True)
    morehopqa_path: Optional[str] = None

    def __post_init__(self):
        task_spec(self.name)  # an unknown task is refused with the list of known ones

    def file(self, paths: Paths) -> Path:
        return task_path(Path(paths.data_dir) / RULER_SUBDIR, self.name, self.length)

    def generate(self, paths: Paths, tokenizer) -> Path:
        """Write the task's file (atomically), fitting lengths with ``tokenizer``."""
        log.info("generating %s at length %d (%d samples, seed %d)", self.name, self.length, self.num_samples,
                 self.seed)
        return write_task(Path(paths.data_dir) / RULER_SUBDIR, self.name, max_seq_length=self.length,
                          tokenizer=tokenizer, num_samples=self.num_samples, seed=self.seed,
                          morehopqa_path=self.morehopqa_path or morehopqa_sample())

    def raw_path(self, paths: Paths, tokenizer=None) -> Path:
        path = self.file(paths)
        if path.is_file():
            return path
        if self.generate_missing:
            # Jobs of a sweep needing the same task together: one generates it, the others wait and read it.
            return create_once(path, lambda: path if path.is_file() else None,
                               lambda: self.generate(paths, tokenizer))
        raise UnknownDatasetError(
            f"dataset '{self.name}' at length {self.length}: {path} does not exist (lengths present: "
            f"{ruler_lengths(paths.data_dir, self.name) or 'none'}); generate it with "
            f"`python exp/exp2/prepare_data.py dataset={self.name} length={self.length}`")

    def load_raw(self, path: Path, tokenizer=None, limit: Optional[int] = None) -> list[CachedExample]:
        return load_ruler_jsonl(path, task=self.name, tokenizer=tokenizer, limit=limit)


@dataclass(kw_only=True)
class RulerJsonl(Dataset):
    """Any RULER-format JSONL file (``path``), e.g. one written by upstream RULER or copied from another machine."""

    kind: ClassVar[str] = "ruler"
    path: str

    def raw_path(self, paths: Paths, tokenizer=None) -> Path:
        path = Path(self.path)
        if not path.is_file():
            raise DataError("no such RULER-format JSONL file (dataset.path)", file=path)
        return path

    def load_raw(self, path: Path, tokenizer=None, limit: Optional[int] = None) -> list[CachedExample]:
        return load_ruler_jsonl(path, task=self.name, tokenizer=tokenizer, limit=limit)


__all__ = ["RULER_SUBDIR", "RulerJsonl", "RulerTask", "TASKS", "ruler_lengths"]
