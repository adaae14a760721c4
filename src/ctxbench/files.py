"""File helpers every writer shares: atomic replacement and file names made from ids."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def safe_filename(name) -> str:
    """``name`` with every run of characters outside ``[A-Za-z0-9_.-]`` replaced by one underscore."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip(".") or "_"
