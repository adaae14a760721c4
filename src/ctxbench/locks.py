"""Shared caches made once when several jobs start together (docs/scale-out.md).

A sweep's jobs (joblib processes, Ray workers, Slurm tasks on a shared file system) may all need the same dequantised
model, corpus embeddings or generated RULER file on first use. ``create_once`` takes an exclusive file lock beside the
target, checks again whether another job made it meanwhile, and only then runs the maker; makers write through a
temporary name and an atomic rename, so a reader that does not lock never sees half a cache either.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, TypeVar

from filelock import FileLock, Timeout

log = logging.getLogger(__name__)

T = TypeVar("T")


def lock_path(target: str | Path) -> Path:
    target = Path(target)
    return target.with_name(target.name + ".lock")


def create_once(target: str | Path, ready: Callable[[], T | None], make: Callable[[], T], *,
                timeout_s: float = -1) -> T:
    """``ready()`` if it returns a value; otherwise, holding ``<target>.lock``, ``ready()`` again (another job may have
    made it while this one waited) or ``make()``. ``timeout_s < 0`` waits as long as the maker takes."""
    found = ready()
    if found is not None:
        return found
    lock = lock_path(target)
    lock.parent.mkdir(parents=True, exist_ok=True)
    file_lock = FileLock(str(lock))
    try:
        file_lock.acquire(timeout=0)
    except Timeout:
        log.info("waiting for another job to finish %s", target)
        file_lock.acquire(timeout=timeout_s)
    try:
        found = ready()
        return found if found is not None else make()
    finally:
        file_lock.release()
