"""The settings record beside a sampled cache, and whether the cache may stand in for the data a run asks for.

The sampling stage writes ``<cache>.config.json`` when it creates a cache (``ctxbench.sampling.cache``): the dataset
settings, the data file's sha256, the model, the retriever, template, generator and judge. A dataset part reading the
cache in place of its raw data (``ctxbench.datasets.base.Dataset.load``) compares that record with the run's own
settings here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional


def config_path(cache: Path) -> Path:
    return cache.with_name(cache.name + ".config.json")


# Dataset settings that do not change the rows a dataset yields, and model settings that do not change its tokenizer:
# left out when a sampled cache's record is checked against a run (cache_mismatch).
NOT_DATA_KEYS = ("_target_", "sha256", "use_cache", "generate_missing")
TOKENIZER_KEYS = ("name", "backend", "path", "gguf_file", "revision", "model_name", "tokenizer")


def cache_mismatch(cache: Path, dataset: dict[str, Any], model: Optional[dict[str, Any]]) -> Optional[str]:
    """Why the sampled cache ``cache`` cannot stand in for the data a run asks for, or None when it can.

    The cache's settings record (``<cache>.config.json``, written by the sampling stage) names the dataset settings
    (the length, the data file, the generation seed, ...) and the model (whose tokenizer made the spans) the cache was
    made from; ``dataset`` (the run's dataset part, as plain fields) and ``model`` (the run's model config) are
    compared with them. A cache without a record (made elsewhere, copied in) is taken as it is.
    """
    record = config_path(cache)
    if not record.is_file():
        return None
    made = json.loads(record.read_text(encoding="utf-8"))
    was = made.get("dataset") or {}
    diff = [f"dataset.{k}={was[k]!r} (asked: {dataset[k]!r})" for k in sorted(set(was) & set(dataset))
            if k not in NOT_DATA_KEYS and not _same_value(k, was[k], dataset[k])]
    made_model = made.get("model") or {}
    if model is not None:
        diff += [f"model.{k}={made_model.get(k)!r} (asked: {model.get(k)!r})" for k in TOKENIZER_KEYS
                 if k in made_model and made_model.get(k) != model.get(k)]
    return "; ".join(diff) or None


def _same_value(key: str, a: Any, b: Any) -> bool:
    """Paths compare by the file they name (a cache made with ``data/x.jsonl`` stands for ``./data/x.jsonl``)."""
    if key.endswith("path") and isinstance(a, str) and isinstance(b, str):
        return Path(a).resolve() == Path(b).resolve()
    return a == b
