"""Where the sampling stage writes, so that a rerun resumes and nothing is mixed or lost (docs/sampling.md).

For a cache ``<name>.jsonl`` (the CachedExample rows kept) the stage also keeps, beside it:

- ``<name>.jsonl.config.json``: the settings that change what is generated (data, model, retriever, template, pool,
  generator, judge); written when the cache is created. A run with other settings refuses to append, naming the keys.
- ``<name>.jsonl.log.jsonl``: one line per processed dataset row (kept or why not, retrieved ids, the prompt sent,
  the generation, ``seconds``: its share of the stage's wall time), and
  a final ``{"done": true}`` line when every row of the run's slice is processed. A row is processed once: a rerun skips
  the rows in the log or in the cache (a kill between the two writes leaves the row in the cache only).

Shard ``i`` of ``n`` writes ``<name>.shard-<i>-of-<n>.jsonl`` (and its two companions); ``merge_shards`` joins the
shards into ``<name>.jsonl`` in dataset order, refusing missing, unfinished or overlapping shards.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from ctxbench.core.cache_record import config_path
from ctxbench.core.errors import DataError
from ctxbench.example import CachedExample, ExampleStore, read_examples
from ctxbench.utils.files import atomic_write_text
from ctxbench.core.jsonl import AppendOnlyJsonl, iter_jsonl
from ctxbench.core.part import settings_of
from ctxbench.core.shards import shard_path


def log_path(cache: Path) -> Path:
    return cache.with_name(cache.name + ".log.jsonl")


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]


def field_defaults(target: str) -> dict[str, Any]:
    """A part class's fields at their defaults, as ``settings()`` writes them ({} for a class that cannot be imported
    here or is not a dataclass)."""
    try:
        from hydra.utils import get_class

        cls = get_class(target)
    except (ImportError, ValueError):
        return {}
    if not dataclasses.is_dataclass(cls):
        return {}
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = settings_of(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = settings_of(f.default_factory())
    return out


def as_recorded_then(old: Any, new: Any) -> Any:
    """``old`` (a cache's settings record) with the keys added since it was written read as they behaved then: a
    setting of a part the record lacks is that part's default, and an unset (None) setting it lacks is unset. Only
    such keys are filled: a key the record has keeps its recorded value."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return old
    target = new.get("_target_") if new.get("_target_") == old.get("_target_") else None
    defaults = field_defaults(target) if isinstance(target, str) else {}
    out = {k: as_recorded_then(v, new.get(k)) for k, v in old.items()}
    for k, v in new.items():
        if k not in out and (v is None or (k in defaults and defaults[k] == v)):
            out[k] = v
    return out


def check_config(cache: Path, settings: dict[str, Any], record_new: bool = True) -> None:
    """Record ``settings`` for a new cache, or refuse to append to a cache made with other settings
    (``record_new=False``: check only, write nothing). A record written before a setting existed reads it at its
    default (``as_recorded_then``), as run_exp reads its results."""
    record = config_path(cache)
    if record.exists():
        old = as_recorded_then(json.loads(record.read_text(encoding="utf-8")), settings)
        diff = _differences(old, settings)
        if diff:
            raise DataError(f"made with other settings ({', '.join(diff[:6])}); use another cache path "
                            f"(cache=...) or paths.samples_dir", file=cache)
    elif cache.exists() and cache.stat().st_size > 0:
        raise DataError(f"exists without {record.name}: it was not made by this stage with these settings; "
                        f"use another cache path (cache=...)", file=cache)
    elif record_new:
        atomic_write_text(record, json.dumps(settings, indent=2, sort_keys=True, default=str) + "\n")


class SampleCache:
    """The kept examples and the processing log of one run (one shard). Use as a context manager."""

    def __init__(self, path: Path, settings: dict[str, Any]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        check_config(self.path, settings)
        self.store = ExampleStore(self.path)
        self.log = AppendOnlyJsonl(log_path(self.path), key=lambda obj: obj.get("id", "<done>"))

    def __enter__(self) -> "SampleCache":
        self.store.__enter__()
        self.log.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.log.__exit__(*exc)
        self.store.__exit__(*exc)

    def processed(self, example_id: str) -> bool:
        return example_id in self.log or example_id in self.store

    @property
    def kept(self) -> int:
        return len(self.store)

    def record(self, example_id: str, entry: dict[str, Any], kept: Optional[CachedExample]) -> None:
        """The example first (so a kill in between leaves it processed), then its log line."""
        if kept is not None and example_id not in self.store:
            self.store.add(kept)
        if example_id not in self.log:
            self.log.append({"id": example_id, **entry})

    def finish(self) -> None:
        if "<done>" not in self.log:
            self.log.append({"done": True})


def funnel(path: Path) -> dict[str, Any]:
    """Counts over a cache's log: rows processed, generated, well-formed, judged correct, kept, rejection reasons,
    ``box_forced``: generations in which a decoding guard wrote box markup (``Generation.forced``), and ``seconds``:
    the sampling stage's wall time over the rows whose log records it (``timed_rows`` of them; older logs do not)."""
    statuses: Counter = Counter()
    reasons: Counter = Counter()
    n = guarded = timed = 0
    seconds = 0.0
    for _, obj in iter_jsonl(log_path(path)) if log_path(path).exists() else []:
        if "id" not in obj:
            continue
        n += 1
        guarded += bool((obj.get("generation") or {}).get("forced"))
        if obj.get("seconds") is not None:
            timed += 1
            seconds += float(obj["seconds"])
        statuses[obj["status"]] += 1
        if obj["status"] == "malformed":  # the format check's stable reason; other statuses are their own reason
            reasons[obj.get("reason") or "malformed"] += 1
        elif obj["status"] != "kept":
            reasons[obj["status"]] += 1
    generated = n - statuses["generation_error"]
    well_formed = generated - statuses["malformed"]
    judged = well_formed - statuses["judge_error"]
    correct = judged - statuses["judged_wrong"]
    return {"processed": n, "generated": generated, "well_formed": well_formed, "judged": judged,
            "judged_correct": correct, "kept": statuses["kept"], "rejections": dict(sorted(reasons.items())),
            "box_forced": guarded, "seconds": round(seconds, 3) if timed else None, "timed_rows": timed}


def merge_shards(cache: Path, count: int, order: list[str], max_examples: Optional[int] = None) -> dict[str, Any]:
    """Join shards ``0..count-1`` of ``cache`` into ``cache`` in dataset ``order`` (example ids), keeping the first
    ``max_examples``. Refuses a missing or unfinished shard, shards made with different settings, and an example
    (or a processed row) claimed by two shards. The merged cache gets the shards' settings and their logs."""
    cache = Path(cache)
    if cache.exists():
        raise DataError("exists already; merging writes a new cache (remove it or choose another cache=)", file=cache)
    examples: dict[str, CachedExample] = {}
    logs: dict[str, dict] = {}
    settings = None
    for i in range(count):
        p = shard_path(cache, i, count)
        lines, s = _finished_shard(p, i, count)
        if settings is not None and _differences(settings, s):
            raise DataError(f"shard {i} was made with other settings ({', '.join(_differences(settings, s)[:6])})",
                            file=p)
        settings = s
        for obj in (obj for obj in lines if "id" in obj):
            if obj["id"] in logs:
                raise DataError(f"row {obj['id']!r} was processed by two shards", file=log_path(p))
            logs[obj["id"]] = obj
        for ex in read_examples(p):
            if ex.example_id in examples:
                raise DataError(f"example {ex.example_id!r} is in two shards", file=p)
            examples[ex.example_id] = ex
    position = {eid: i for i, eid in enumerate(order)}
    unknown = [eid for eid in examples if eid not in position]
    if unknown:
        raise DataError(f"example {unknown[0]!r} is not a row of the dataset being merged", file=cache)
    kept = sorted(examples.values(), key=lambda e: position[e.example_id])
    if max_examples is not None:
        kept = kept[:max_examples]
    atomic_write_text(config_path(cache), json.dumps(settings, indent=2, sort_keys=True, default=str) + "\n")
    atomic_write_text(log_path(cache), "".join(json.dumps(logs[eid], ensure_ascii=False) + "\n"
                                               for eid in order if eid in logs) + json.dumps({"done": True}) + "\n")
    atomic_write_text(cache, "".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n" for e in kept))
    return {"shards": count, "kept": len(kept), "rows": len(logs)}


def _finished_shard(p: Path, i: int, count: int) -> tuple[list[dict], dict]:
    """Shard ``i``'s log lines and settings, refused when it is missing or unfinished (no done line)."""
    if not p.exists() or not log_path(p).exists():
        raise DataError(f"shard {i} of {count} is missing", file=p)
    lines = [obj for _, obj in iter_jsonl(log_path(p))]
    if not any(obj.get("done") for obj in lines):
        raise DataError(f"shard {i} of {count} is unfinished (no done line in its log); rerun it", file=p)
    return lines, json.loads(config_path(p).read_text(encoding="utf-8"))
