"""JSONL reading with line numbers in every error, and an append-only writer that survives crashes.

Both the CachedExample store and the per-example result files of run_exp use these, so resume behaves the same
everywhere.
"""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import jsonlines
from filelock import Timeout

from ctxbench.core.errors import DataError
from ctxbench.utils.locks import hold, let_go

log = logging.getLogger(__name__)


class _NumberedLines:
    """Iterates a text file and remembers the number of the line last handed out (jsonlines does not expose it)."""

    def __init__(self, fp, complete_only: bool = False):
        self._fp = fp
        self._complete_only = complete_only
        self.lineno = 0

    def __iter__(self):
        for line in self._fp:
            if self._complete_only and not line.endswith("\n"):
                return  # a last line still being written
            self.lineno += 1
            yield line


def iter_jsonl(path: str | Path, complete_only: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-empty line; a malformed line is a DataError naming file and line.
    ``complete_only``: leave out a last line without its newline (reading a file that a running job appends to)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such JSONL file")
    with open(path, encoding="utf-8") as fp:
        yield from _iter_lines(fp, path, complete_only)


def _ending_at(msg: str) -> str:
    # the decoder's messages mostly name no position ("Expecting ',' delimiter"), some end on "at" already
    # ("Unterminated string starting at"): "at" once either way
    return msg if msg.endswith(" at") else f"{msg} at"


def _iter_lines(fp, path: Path, complete_only: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    lines = _NumberedLines(fp, complete_only)
    reader = jsonlines.Reader(lines)
    while True:
        try:
            obj = reader.read(type=dict, skip_empty=True)
        except EOFError:
            return
        except jsonlines.InvalidLineError as exc:
            cause = exc.__cause__
            # the line number is the DataError's; the decoder's own position within the line is its column
            why = (f"{_ending_at(cause.msg)} column {cause.colno}" if isinstance(cause, json.JSONDecodeError)
                   else "valid JSON of another type")
            raise DataError(f"not a JSON object ({why})", file=path, line=exc.lineno) from None
        yield lines.lineno, obj


def _dumps(obj: Any) -> str:
    # Stable key order and no ASCII escaping: byte-identical files for identical content, readable text.
    return json.dumps(obj, ensure_ascii=False, sort_keys=False)


class AppendOnlyJsonl:
    """Appends whole lines only (write + flush + fsync per line) and knows which keys are already written.

    On open, a torn last line (a crash mid-write: no trailing newline, or not valid JSON) is cut off so the file stays
    valid; every complete line is kept. ``key`` extracts the identity used for resuming (e.g. the example id).
    One writer at a time: ``<path>.lock`` is held while open (``ctxbench.utils.locks.hold``, the project's one lock
    scheme), and a second writer, in this process or another (the same job started twice), is refused before it reads
    or cuts anything, since it would take the first one's line in progress for a torn one and both would write the same
    keys.
    """

    def __init__(self, path: str | Path, key: Callable[[dict[str, Any]], str],
                 validate: Optional[Callable[[dict[str, Any], int], None]] = None):
        self.path = Path(path)
        self._key = key
        self.done: set[str] = set()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock = hold(self.path)
        except Timeout:
            raise DataError("another process is writing this file (the same job running twice?); wait for it to end "
                            "or stop it, then rerun to resume", file=self.path) from None
        try:
            self._fp = open(self.path, "a", encoding="utf-8")
        except BaseException:
            let_go(self._lock)
            raise
        try:
            # every complete line is checked before anything is cut: a refused file is left as it was
            data = self.path.read_bytes()
            cut = self._intact_length(data)
            for lineno, obj in _iter_lines(io.StringIO(data[:cut].decode("utf-8")), self.path):
                if validate is not None:
                    validate(obj, lineno)
                k = key(obj)
                if k in self.done:
                    raise DataError(f"duplicate key {k!r}", file=self.path, line=lineno)
                self.done.add(k)
            self._repair_tail(data, cut)
        except BaseException:
            self._fp.close()
            let_go(self._lock)
            raise
        self._writer = jsonlines.Writer(self._fp, dumps=_dumps, flush=True)

    @staticmethod
    def _intact_length(data: bytes) -> int:
        """The length of ``data`` without a torn last line (no trailing newline, or not valid JSON)."""
        if not data:
            return 0
        cut = len(data)
        if not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
        else:
            last_start = data.rfind(b"\n", 0, len(data) - 1) + 1
            try:
                json.loads(data[last_start:].decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                cut = last_start
        return cut

    def _repair_tail(self, data: bytes, cut: int) -> None:
        if cut < len(data):
            log.warning("%s: dropping a torn last line (%d bytes) left by an interrupted write",
                        self.path, len(data) - cut)
            with open(self.path, "r+b") as fp:
                fp.truncate(cut)

    def __contains__(self, key: str) -> bool:
        return key in self.done

    def __len__(self) -> int:
        return len(self.done)

    def append(self, obj: dict[str, Any]) -> bool:
        """Write one line; returns False (and writes nothing) when its key is already present."""
        k = self._key(obj)
        if k in self.done:
            return False
        self._writer.write(obj)
        os.fsync(self._fp.fileno())
        self.done.add(k)
        return True

    def close(self) -> None:
        try:
            self._writer.close()
            self._fp.close()
        finally:
            let_go(self._lock)
            self._lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
