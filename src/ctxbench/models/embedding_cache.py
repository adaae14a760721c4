"""The files of the corpus-embedding cache (``ctxbench.models.embedder``), whole and in shards (docs/scale-out.md).

A cache folder ``<cache_dir>/embeddings/<model name>/<key digest>/`` holds ``embeddings.npy`` and ``key.json`` (the
key it was made under). Shard ``i`` of ``n`` (``shard.index=i shard.count=n``: corpus rows ``i, i+n, ...``) writes
``embeddings.shard-<i>-of-<n>.npy`` and ``key.shard-<i>-of-<n>.json`` into the folder of the whole corpus, so every
shard job and the later unsharded job compute the same folder from the same corpus and settings. ``join_shards``
puts the rows back in corpus order; it refuses a missing shard, the same shard twice, shards encoded under other
settings or of another corpus, and shards of two different counts, naming the file. Every file is written through a
temporary name and an atomic rename, the key last: a key without its array is never seen.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ctxbench.core.errors import DataError
from ctxbench.utils.files import atomic_write, atomic_write_text
from ctxbench.core.shards import Shard, shard_path

log = logging.getLogger(__name__)

ARRAY = "embeddings.npy"
KEY = "key.json"
SHARD_NAME = re.compile(r"(?:embeddings|key)\.shard-(\d+)-of-(\d+)\.(?:npy|json)")


def _plain(key: dict[str, Any]) -> dict[str, Any]:
    """The key as it reads back from JSON (tuples become lists), for comparisons with a stored key."""
    return json.loads(json.dumps(key))


def _save_array(path: Path, emb: np.ndarray) -> None:
    atomic_write(path, lambda f: np.save(f, np.ascontiguousarray(emb, dtype=np.float32)))


def _load_array(path: Path, rows: int) -> Optional[np.ndarray]:
    """The float32 ``(rows, dim)`` array in ``path``; None when it is unreadable or another shape."""
    try:
        emb = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    return emb if emb.ndim == 2 and emb.shape[0] == rows and emb.dtype == np.float32 else None


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def load_cached(folder: Path, key: dict[str, Any], n: int) -> Optional[np.ndarray]:
    """The cached embeddings when ``key.json`` in ``folder`` equals ``key`` and the array has ``n`` rows."""
    if not (folder / KEY).is_file() or _read_json(folder / KEY) != _plain(key):
        return None
    return _load_array(folder / ARRAY, n) if (folder / ARRAY).is_file() else None


def save_cached(folder: Path, key: dict[str, Any], emb: np.ndarray) -> None:
    """Write ``embeddings.npy`` then ``key.json`` (each atomically): a reader sees the key only with its array."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / KEY).unlink(missing_ok=True)
    _save_array(folder / ARRAY, emb)
    atomic_write_text(folder / KEY, json.dumps(key, indent=1, sort_keys=True))


# --- shards ----------------------------------------------------------------------------------------------------------

def shard_files(folder: Path, shard: Shard) -> tuple[Path, Path]:
    """``(embeddings.shard-<i>-of-<n>.npy, key.shard-<i>-of-<n>.json)`` in ``folder``."""
    return (shard_path(folder / ARRAY, shard.index, shard.count),
            shard_path(folder / KEY, shard.index, shard.count))


def shard_rows(n: int, shard: Shard) -> int:
    return len(range(shard.index, n, shard.count))


def _shard_record(key: dict[str, Any], shard: Shard) -> dict[str, Any]:
    return {"shard": {"index": shard.index, "count": shard.count}, "key": _plain(key)}


def save_shard(folder: Path, key: dict[str, Any], shard: Shard, emb: np.ndarray) -> None:
    """Write one shard's rows, then its record (the whole corpus's ``key`` and the shard's place)."""
    folder.mkdir(parents=True, exist_ok=True)
    array, record = shard_files(folder, shard)
    record.unlink(missing_ok=True)
    _save_array(array, emb)
    atomic_write_text(record, json.dumps(_shard_record(key, shard), indent=1, sort_keys=True))


def load_shard(folder: Path, key: dict[str, Any], shard: Shard, n: int) -> Optional[np.ndarray]:
    """A shard written earlier for the same corpus and settings (a rerun of the shard job); None otherwise."""
    array, record = shard_files(folder, shard)
    if not record.is_file() or _read_json(record) != _shard_record(key, shard):
        return None
    return _load_array(array, shard_rows(n, shard))


def remove_shards(folder: Path) -> None:
    """Delete the shard files of ``folder`` (once joined into the whole cache, they are no longer needed)."""
    for p in folder.iterdir():
        if SHARD_NAME.fullmatch(p.name):
            p.unlink(missing_ok=True)


def _changed(old: dict, new: dict) -> str:
    return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new), key=str)
                     if old.get(k) != new.get(k))


def _elsewhere(folder: Path, record_name: str, key: dict[str, Any]) -> Optional[tuple[Path, str]]:
    """A shard record of the same corpus under other settings, in the other folders of the cache (any model), and
    how its key differs: why the shard is missing here."""
    for other in sorted(folder.parent.parent.glob(f"*/*/{record_name}")):
        stored = (_read_json(other) or {}).get("key")
        if other.parent != folder and isinstance(stored, dict) and stored.get("texts_sha256") == key["texts_sha256"]:
            return other, _changed(stored, key)
    return None


def join_shards(folder: Path, key: dict[str, Any], n: int) -> Optional[np.ndarray]:
    """The corpus embeddings joined from the shard files in ``folder`` (module doc), ``(n, dim)`` in corpus order;
    None when there are none."""
    counts: dict[int, set[int]] = {}
    for p in folder.iterdir() if folder.is_dir() else ():
        m = SHARD_NAME.fullmatch(p.name)
        if m:
            counts.setdefault(int(m[2]), set()).add(int(m[1]))
    if not counts:
        other = _elsewhere(folder, "key.shard-*-of-*.json", key)
        if other is not None:  # the user may have meant these: say why they are not used
            log.warning("embedder: corpus encoding shards of this corpus under other settings (%s) are not used: %s",
                        other[1], other[0])
        return None
    if len(counts) > 1:
        raise DataError(f"corpus encoding shards of {' and of '.join(map(str, sorted(counts)))} jobs side by side; "
                        f"delete one set (embeddings.shard-*-of-<n>.npy, key.shard-*-of-<n>.json)", file=folder)
    (count,) = counts
    parts = [_read_shard(folder, key, n, Shard(i, count)) for i in range(count)]
    if len({p.shape[1] for p in parts}) > 1:
        raise DataError(f"shards of different widths {sorted({p.shape[1] for p in parts})}", file=folder)
    out = np.empty((n, parts[0].shape[1]), dtype=np.float32)
    for i, emb in enumerate(parts):
        out[i::count] = emb
    return out


def _read_shard(folder: Path, key: dict[str, Any], n: int, shard: Shard) -> np.ndarray:
    """One shard's embeddings, refused (naming the shard to rerun) when missing, unfinished, encoded under other
    settings, another shard's, or of the wrong shape."""
    i, count = shard.index, shard.count
    array, record = shard_files(folder, shard)
    if not (record.is_file() and array.is_file()):
        other = _elsewhere(folder, record.name, key)
        if other is not None:
            raise DataError(f"shard {i} of {count} of this corpus was encoded under other settings ({other[1]}); "
                            f"rerun it with the settings of the others", file=other[0])
        raise DataError(f"shard {i} of {count} of the corpus encoding is missing or unfinished; run it "
                        f"(shard.index={i} shard.count={count})", file=record)
    stored = _read_json(record)
    if not isinstance(stored, dict) or not isinstance(stored.get("key"), dict):
        raise DataError("not a shard record of the embedding cache; delete it and rerun the shard", file=record)
    place = stored.get("shard") or {}
    if place != {"index": i, "count": count}:
        raise DataError(f"holds shard {place.get('index')} of {place.get('count')}, not {i} of {count}: the same "
                        f"shard twice (a copied file?); rerun shard {i}", file=record)
    expected = _plain(key)
    if stored["key"] != expected:
        raise DataError(f"shard {i} of {count} was encoded under other settings or another corpus "
                        f"({_changed(stored['key'], expected)}); rerun it", file=record)
    emb = _load_array(array, shard_rows(n, shard))
    if emb is None:
        raise DataError(f"not a float32 array of {shard_rows(n, shard)} rows (corpus rows {i}, {i + count}, ... "
                        f"of {n}); rerun shard {i}", file=array)
    return emb

