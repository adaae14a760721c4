"""The memory a Linux control group (a container, a batch job's slice) still lets this process use.

The host's available memory overstates what a process in a limited cgroup may take: a container with an 8 GiB limit
on a 64 GiB host is killed past 8 GiB. The headroom is read the way the kernel documents it
(docs.kernel.org, admin-guide/cgroup-v2 and cgroup-v1/memory): for each group from the process's own up to the root,
its limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) less its usage (``memory.current`` /
``memory.usage_in_bytes``) plus its inactive file cache (``inactive_file`` / ``total_inactive_file`` in
``memory.stat``, which the kernel reclaims before it kills), and the smallest of them; None when no group limits memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

# v1 writes "no limit" as the largest page-aligned signed 64-bit value; anything at or above 2^60 is no limit
_NO_LIMIT = 1 << 60


def _read_int(path: Path) -> Optional[int]:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= _NO_LIMIT else value


def _stat_field(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _own_group(proc_cgroup: Path) -> tuple[Optional[str], Optional[str]]:
    """(v2 path, v1 memory path) of this process from /proc/self/cgroup; None where that hierarchy is absent."""
    v2 = v1 = None
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def _groups(mount: Path, path: str) -> list[Path]:
    """The group's folder and its ancestors under ``mount``; inside a container the recorded path often does not
    exist under the mount (the container sees its own group as the root), and then the mount's root stands for it."""
    parts = [p for p in path.split("/") if p]
    folders = [mount.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]
    return [f for f in folders if f.is_dir()] or [mount]


def _headroom(folders: list[Path], limit: str, usage: str, inactive: str) -> Optional[int]:
    rooms = []
    for folder in folders:
        cap = _read_int(folder / limit)
        if cap is None:
            continue
        used = _read_int(folder / usage) or 0
        rooms.append(max(cap - used + _stat_field(folder / "memory.stat", inactive), 0))
    return min(rooms) if rooms else None


def memory_headroom(root: Path = Path("/sys/fs/cgroup"),
                    proc_cgroup: Path = Path("/proc/self/cgroup")) -> Optional[int]:
    """Bytes this process's cgroups still allow (the tightest of its group and their ancestors), or None when no
    group limits memory or none can be read (not Linux, no cgroup file system)."""
    v2, v1 = _own_group(proc_cgroup)
    if v1 is not None:  # a hybrid host: the v1 memory controller is the one that limits
        return _headroom(_groups(root / "memory", v1), "memory.limit_in_bytes", "memory.usage_in_bytes",
                         "total_inactive_file")
    if v2 is not None:
        # the unified hierarchy is mounted at the root on a v2-only host, under unified/ on a hybrid one
        mount = root if (root / "cgroup.controllers").exists() else root / "unified"
        return _headroom(_groups(mount, v2), "memory.max", "memory.current", "inactive_file")
    return None
