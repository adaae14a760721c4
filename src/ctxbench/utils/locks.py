"""File locks, one scheme for the project: ``filelock`` on ``<target>.lock`` beside the file it guards.

Shared caches made once when several jobs start together (docs/scale-out.md): a sweep's jobs (joblib processes, Ray
workers, Slurm tasks on a shared file system) may all need the same dequantised model, corpus embeddings or generated
RULER file on first use. ``create_once`` takes an exclusive file lock beside the target, checks again whether another
job made it meanwhile, and only then runs the maker; makers write through a temporary name and an atomic rename, so a
reader that does not lock never sees half a cache either.

One writer of a file at a time (``ctxbench.core.jsonl.AppendOnlyJsonl``): ``hold`` takes the lock without waiting, so
the same job started twice is refused at once rather than queued behind the first; ``let_go`` releases it.
"""

from __future__ import annotations

import logging
import os
from contextlib import suppress
from pathlib import Path
from typing import Callable, Optional, TypeVar

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


def hold(target: str | Path) -> Optional[FileLock]:
    """Hold ``<target>.lock`` from now until ``let_go``, without waiting: ``filelock.Timeout`` when another holder has
    it (another process, or another writer in this one: each ``FileLock`` locks its own descriptor). None, with a
    warning, where the file system cannot lock (some network mounts): one writer at a time is then the caller's to
    ensure."""
    lock = FileLock(str(lock_path(target)), thread_local=False)  # opened in one thread, maybe closed in another
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise
    except (OSError, NotImplementedError) as exc:
        log.warning("%s: cannot lock (%s); make sure one process writes it at a time", target, exc)
        return None
    return lock


def let_go(lock: Optional[FileLock]) -> None:
    """Release a lock taken by ``hold``, removing its file first, while still held: a folder keeps no trace of a writer
    that has ended (a job folder lists what its run wrote). A writer that opened the file just before finds it
    unlinked when it gets the lock, and filelock does not count that as holding it."""
    if lock is None:
        return
    with suppress(FileNotFoundError):
        os.unlink(lock.lock_file)
    lock.release()


def held_elsewhere(target: str | Path) -> bool:
    """Whether another writer holds ``<target>.lock`` now (checked without waiting, and without leaving a lock file
    where there was none): a job can refuse a folder another job is writing before it changes anything there."""
    if not lock_path(target).exists():
        return False
    try:
        lock = hold(target)
    except Timeout:
        return True
    let_go(lock)
    return False
