"""File helpers every writer shares: atomic replacement and file names made from ids."""

from __future__ import annotations

import filecmp
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
    half a file (the temporary file is removed when ``write`` fails). A file already there with the same bytes is
    left as it was (its time too): a rerun that computes the same summary touches nothing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        if path.is_file() and filecmp.cmp(tmp, path, shallow=False):
            Path(tmp).unlink()
            return path
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's file is private (0600): give it what open() would
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def save_png(fig, path: str | Path) -> Path:
    """A matplotlib figure as PNG, atomically; without the writer's version stamp, so that the same figure is the
    same bytes on any machine and an unchanged plot is left as it was (``atomic_write``)."""
    return atomic_write(path, lambda f: fig.savefig(f, format="png", metadata={"Software": None}))


def _umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def safe_filename(name) -> str:
    """``name`` with every run of characters outside ``[A-Za-z0-9_.-]`` replaced by one underscore."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip(".") or "_"
