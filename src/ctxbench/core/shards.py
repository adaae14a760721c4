"""Splitting a stage's dataset rows across jobs (``shard.index`` / ``shard.count``) and checking that the shards being
merged cover every row exactly once (sampling: ``ctxbench.sampling.cache``; run_exp: ``ctxbench.stages.run_shards``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ctxbench.core.errors import DataError


@dataclass(frozen=True)
class Shard:
    index: int = 0
    count: int = 1

    def __post_init__(self):
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"shard.index={self.index} must be in [0, shard.count={self.count})")

    def select(self, items: list) -> list:
        """Rows index, index + count, ... of the dataset (every shard sees rows from the whole dataset)."""
        return items[self.index::self.count]

    def path(self, cache: Path) -> Path:
        return cache if self.count == 1 else shard_path(cache, self.index, self.count)


def shard_path(cache: Path, index: int, count: int) -> Path:
    return cache.with_name(f"{cache.stem}.shard-{index}-of-{count}{cache.suffix}")


def interleave(slices: dict[int, Sequence[str]], count: int, total: int, where: str) -> list[str]:
    """The dataset order of row ids from each shard's slice (shard i holds rows i, i + count, ...). Refuses a missing
    shard, a slice of the wrong length and a row in two shards, naming ``where``."""
    missing = [i for i in range(count) if i not in slices]
    if missing:
        raise DataError(f"shard {missing[0]} of {count} is missing (found shards {sorted(slices)})", file=where)
    order: list[str] = [""] * total
    seen: dict[str, int] = {}
    for i in range(count):
        expected = len(range(i, total, count))
        if len(slices[i]) != expected:
            raise DataError(f"shard {i} of {count} holds {len(slices[i])} rows; {expected} expected of {total}",
                            file=where)
        for k, row in enumerate(slices[i]):
            if row in seen:
                raise DataError(f"row {row!r} is in shards {seen[row]} and {i}", file=where)
            seen[row] = i
            order[i + k * count] = row
    return order
