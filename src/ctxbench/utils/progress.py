"""Progress of the long steps (corpus encoding, search, reranking, deletion and ablation passes, sampling, MDL
scoring, the stages' loops over examples).

On a terminal: a tqdm bar with counts and rates, shown once a step has run ``TERMINAL_DELAY_S`` seconds (quick steps
print nothing). Elsewhere (a launcher's log file, a pipe): a log line in tqdm's format every
``CTXBENCH_PROGRESS_EVERY_S`` seconds (environment; default 30) while a step runs, and a last one when a step that
wrote lines ends; shorter steps write nothing. Off with ``set_enabled(False)``: the stages set it from their
``progress`` key.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Optional

from tqdm import tqdm

log = logging.getLogger("ctxbench.utils.progress")

TERMINAL_DELAY_S = 2.0
LOG_EVERY_S = 30.0
_state = {"enabled": True}


def set_enabled(enabled: bool) -> None:
    _state["enabled"] = bool(enabled)


def log_every_s() -> float:
    """Seconds between a step's log lines when the output is not a terminal (``CTXBENCH_PROGRESS_EVERY_S``)."""
    raw = os.environ.get("CTXBENCH_PROGRESS_EVERY_S")
    try:
        return max(0.0, float(raw)) if raw else LOG_EVERY_S
    except ValueError:
        log.warning("CTXBENCH_PROGRESS_EVERY_S=%r is not a number of seconds; using %g", raw, LOG_EVERY_S)
        return LOG_EVERY_S


def _on_terminal() -> bool:
    stream = sys.stderr
    return bool(getattr(stream, "isatty", None) and stream.isatty())


class LogProgress:
    """tqdm's ``update`` / ``set_description`` / ``set_postfix_str`` / ``close`` and context manager, writing tqdm's
    status line to the log at most every ``log_every_s()`` seconds."""

    def __init__(self, total: Optional[int], desc: str, unit: str):
        self.total, self.desc, self.unit, self.postfix = total, desc, unit, ""
        self.n = 0
        self.every = log_every_s()
        self.start = self.last = time.monotonic()
        self.lines = 0
        self.shown: Optional[tuple] = None  # what the last line said: a line saying it again is left out

    def _write(self) -> None:
        now = time.monotonic()
        self.shown = (self.n, self.desc, self.postfix)
        log.info("%s", tqdm.format_meter(self.n, self.total, now - self.start, prefix=self.desc, unit=self.unit,
                                         postfix=self.postfix or None, ascii=True))
        self.last = now
        self.lines += 1

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self.last >= self.every:
            self._write()

    def set_description(self, desc: str, refresh: bool = True) -> None:
        self.desc = desc

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s

    def close(self) -> None:
        # the end of a step that wrote lines, unless its last line said it already (or the bar was closed before)
        if self.lines and self.shown != (self.n, self.desc, self.postfix):
            self._write()

    def __enter__(self) -> "LogProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def bar(total: Optional[int], desc: str, unit: str = "it", leave: bool = False):
    """A progress display for a step of ``total`` items (module doc); use as a context manager or call ``close``.
    ``leave``: keep the finished bar on the terminal (a stage's own bar; the steps inside it leave none)."""
    if not _state["enabled"]:
        return tqdm(total=total, disable=True)
    if _on_terminal():
        return tqdm(total=total, desc=desc, unit=unit, delay=TERMINAL_DELAY_S, leave=leave, dynamic_ncols=True)
    return LogProgress(total, desc, unit)
