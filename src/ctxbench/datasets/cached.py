"""Any CachedExample JSONL file as a dataset kind (``CachedJsonl``), e.g. a sampling-stage cache made elsewhere such as
FlashTrace's code's ``exp/exp2/data/<task>.jsonl`` (docs/data.md, "Caches made elsewhere")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

from ctxbench.datasets.base import Dataset, Paths
from ctxbench.core.errors import DataError
from ctxbench.example import CachedExample, read_examples


@dataclass(kw_only=True)
class CachedJsonl(Dataset):
    """The CachedExample JSONL file at ``path``, read as a sampled cache is (rows without ids numbered by position,
    spans of another or an unrecorded tokenizer redone for the model's). ``use_cache`` is off: the file named is
    itself a cache, and a same-named one in ``samples_dir`` should not stand in for it."""

    kind: ClassVar[str] = "cached"
    path: str
    use_cache: bool = False

    def raw_path(self, paths: Paths, tokenizer=None) -> Path:
        path = Path(self.path)
        if not path.is_file():
            raise DataError("no such CachedExample JSONL file (dataset.path)", file=path)
        return path

    def load_raw(self, path: Path, tokenizer=None, limit: Optional[int] = None) -> list[CachedExample]:
        return list(read_examples(path, tokenizer=tokenizer))[:limit]


__all__ = ["CachedJsonl"]
