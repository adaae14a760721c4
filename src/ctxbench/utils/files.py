"""File helpers every writer shares: atomic replacement and file names made from ids."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically (``atomic_write``)."""
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def atomic_write(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """``write(f)`` into a temporary file in the same folder as ``path``, then put it in place, so readers never see
    half a file (the temporary file is removed when ``write`` fails)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's file is private (0600): give it what open() would
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def safe_filename(name) -> str:
    """``name`` with every run of characters outside ``[A-Za-z0-9_.-]`` replaced by one underscore."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip(".") or "_"
