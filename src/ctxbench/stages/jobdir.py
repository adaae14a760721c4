"""The job folder of a stage run started from the command line, and where it is.

Nothing of a job folder changes before the stage accepts the run. Hydra itself writes no ``.hydra/`` files
(``hydra.output_subdir: null`` in ``conf/hydra/default.yaml``) and the job's log file handler holds its records
(``DeferredFileHandler``); the stage calls ``accept()`` right before its first write into the folder (run_exp: after
the results already there were checked against this run's settings), and only then are ``.hydra/config.yaml``,
``hydra.yaml`` and ``overrides.yaml`` written (the files, and the content, Hydra would have written) and the log
opened. A run refused before that leaves the folder byte for byte as it was; a folder that Hydra created for it, still
empty, is removed. A stage that ends without calling ``accept()`` is accepted when it returns.

``resume`` (``null | latest | <dir>``, conf/run.yaml and conf/sample.yaml) picks the run or sweep folder: the
``ctxbench.job_dir`` resolver of ``hydra.run.dir`` / ``hydra.sweep.dir`` (``ctxbench.stages.run_dirs``) returns a new
timestamped folder, the newest folder beside it (``latest``: the same stage, and for a single run the same dataset; by
name, which is the start time), or the given folder, which must exist. A Ctrl-C ends with one line: what was kept and
the command that resumes.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from ctxbench.utils.files import atomic_write


HYDRA_SUBDIR = ".hydra"
MANIFEST = "manifest.json"
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports it

_current: Optional["JobDir"] = None


class DeferredFileHandler(logging.FileHandler):
    """A file handler (Hydra's job log, ``conf/hydra/default.yaml``) that holds its records, and opens no file, until
    the job is accepted; a job refused before that adds no byte to an existing log and creates none."""

    def __init__(self, filename, mode: str = "a", encoding: Optional[str] = None, delay: bool = True,
                 errors: Optional[str] = None):
        super().__init__(filename, mode, encoding, delay=True, errors=errors)
        self._held: Optional[list[logging.LogRecord]] = []
        self._size_at_start: Optional[int] = None  # the log's length before this run's lines (None: no log yet)

    def emit(self, record: logging.LogRecord) -> None:
        if self._held is not None:
            self._held.append(record)
        else:
            super().emit(record)

    def start(self) -> None:  # (not ``release``: that is the Handler's lock)
        """Write the held records and go on writing; a closed handler (an earlier job's) stays closed."""
        held, self._held = self._held, None
        if held is not None and os.path.exists(self.baseFilename):
            self._size_at_start = os.path.getsize(self.baseFilename)
        for record in held or ():
            super().emit(record)

    def keep_record_if_idle(self) -> None:
        """A run that found nothing to do (``nothing_to_do``) made none of the folder's results: its record
        (``.hydra/``, ``manifest.json``) is put back as the run that made them wrote it, bytes and times."""
        if self.idle:
            _restore(self._record)

    def forget_run(self) -> None:
        """Take this run's lines out of an existing log again (a rerun that changed nothing in its folder: its lines
        would be the only change to a committed job). A log this run created is kept."""
        if self._size_at_start is None or self._held is not None:
            return
        self.flush()
        os.truncate(self.baseFilename, self._size_at_start)

    def close(self) -> None:
        if self._held is not None:  # never accepted: its records are dropped
            self._held = []
        super().close()


def to_job_log(message: str) -> None:
    """``message`` into the job's log file alone (run_exp.log: the run's own record of how it ended; the terminal has
    it once, on stderr)."""
    record = logging.LogRecord(__name__, logging.WARNING, __file__, 0, message, None, None)
    for h in logging.getLogger().handlers:
        if isinstance(h, DeferredFileHandler):
            h.handle(record)


def _forget_run_in_logs() -> None:
    for h in logging.getLogger().handlers:
        if isinstance(h, DeferredFileHandler):
            h.forget_run()


def _release_logs() -> None:
    for h in logging.getLogger().handlers:
        if isinstance(h, DeferredFileHandler):
            h.start()


class JobDir:
    """One job's folder: ``accept()`` writes Hydra's record of the job and opens its log; until then nothing."""

    def __init__(self, path: str | Path, files: dict[str, str], *, resume_dir: Optional[str] = None,
                 sweep_dir: Optional[str] = None, stage: str = ""):
        self.path = Path(path)
        self.stage = stage  # Hydra's job name: run_exp, sample_and_filter, ...
        self._on_accept: list[Callable[[], None]] = []
        self._files = files  # .hydra/<name> -> text
        self.fresh = not self.path.exists() or not any(self.path.iterdir())
        self.accepted = False
        self.resume_dir = resume_dir  # the folder resume=<dir> names to go on with this run (a sweep: the sweep)
        self.sweep_dir = sweep_dir  # the sweep's folder (-m), None for a single run
        self.kept: Optional[Callable[[], str]] = None
        self.idle = False  # the stage found nothing to do (``nothing_to_do``)
        self._record: dict[Path, tuple[bytes, int]] = {}
        self.started_ns = time.time_ns()

    def written(self) -> str:
        """What the run wrote into the folder (files changed since it started; a subfolder as its file count),
        Hydra's record and the log aside: e.g. ``results.jsonl, summary.json, heatmap_data/ (3 files)``."""
        entries = []
        for p in sorted(self.path.iterdir()) if self.path.is_dir() else []:
            if p.name == HYDRA_SUBDIR or p.suffix == ".log":
                continue
            if p.is_dir():
                n = sum(1 for f in p.rglob("*") if f.is_file() and f.stat().st_mtime_ns >= self.started_ns)
                if n:
                    entries.append(f"{p.name}/ ({n} file{'s' * (n != 1)})")
            elif p.stat().st_mtime_ns >= self.started_ns:
                entries.append(p.name)
        return ", ".join(entries) or "nothing"

    @classmethod
    def from_hydra(cls, cfg) -> "JobDir":
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
        from omegaconf import OmegaConf

        from ctxbench.stages.preflight import override_key

        hydra_cfg = HydraConfig.instance().cfg  # the `hydra` node alone, as Hydra saves it
        hc = hydra_cfg.hydra
        files = {"config.yaml": OmegaConf.to_yaml(cfg), "hydra.yaml": OmegaConf.to_yaml(hydra_cfg),
                 # resume= names the folder the run goes on in, not a setting: the record stays as the run began
                 "overrides.yaml": OmegaConf.to_yaml([o for o in hc.overrides.task if override_key(o) != "resume"])}
        sweep_dir = str(hc.sweep.dir) if hc.mode == RunMode.MULTIRUN else None
        return cls(hc.runtime.output_dir, files, resume_dir=sweep_dir or hc.runtime.output_dir, sweep_dir=sweep_dir,
                   stage=str(hc.job.name))

    def keep_record_if_idle(self) -> None:
        """A run that found nothing to do (``nothing_to_do``) made none of the folder's results: its record
        (``.hydra/``, ``manifest.json``) is put back as the run that made them wrote it, bytes and times."""
        if self.idle:
            _restore(self._record)

    def forget_run(self) -> None:
        """A rerun that wrote nothing (``written``): its lines leave the job's log again, so that the folder is as
        it found it (a finished lane rerun changes no committed file)."""
        _forget_run_in_logs()

    def on_accept(self, call: Callable[[], None]) -> None:
        """``call()`` once the job is accepted (the experiment trackers open their runs then)."""
        self._on_accept.append(call)

    def accept(self) -> None:
        if self.accepted:
            return
        self.accepted = True
        self._record = _snapshot([*(self.path / HYDRA_SUBDIR / n for n in self._files), self.path / MANIFEST])
        d = self.path / HYDRA_SUBDIR
        d.mkdir(parents=True, exist_ok=True)
        for name, text in self._files.items():
            (d / name).write_text(text, encoding="utf-8")
        _release_logs()
        for call in self._on_accept:
            call()

    def discard(self) -> None:
        """A job that ends before it was accepted: the folder Hydra made for it goes if it is still empty."""
        if self.fresh and self.path.is_dir() and not any(self.path.iterdir()):
            self.path.rmdir()

    @contextmanager
    def active(self) -> Iterator["JobDir"]:
        global _current
        previous, _current = _current, self
        try:
            yield self
        finally:
            _current = previous
            if not self.accepted:
                self.discard()

    def interrupted(self, terminated: bool = False) -> None:
        """The one line of a Ctrl-C (what was kept, the command that resumes), then exit code 130; ``terminated``: a
        SIGTERM (a scheduler's stop), the same line opening with "terminated", exit code 143."""
        what = "terminated" if terminated else "interrupted"
        if not self.accepted:
            msg = f"{what} before the run started: nothing written"
            if not self.fresh:
                msg += f" ({shown(self.path)} is as it was)"
        else:
            kept = self.kept() if self.kept is not None else f"kept in {shown(self.path)}"
            msg = f"{what}: {kept}; resume: {resume_command(self.resume_dir or str(self.path))}"
            to_job_log(msg)
        print(msg, file=sys.stderr, flush=True)
        sys.exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED)


def accept() -> None:
    """Called by a stage right before its first write into its job folder (no-op outside a command-line run)."""
    if _current is not None:
        _current.accept()


def nothing_to_do() -> None:
    """Said by a stage that found every result already made: its job's record is kept as it was
    (``JobDir.keep_record_if_idle``)."""
    if _current is not None:
        _current.idle = True


def _snapshot(paths) -> dict[Path, tuple[bytes, int]]:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in paths if p.is_file()}


def _restore(saved: dict[Path, tuple[bytes, int]]) -> None:
    for p, (data, mtime_ns) in saved.items():
        if not p.is_file() or p.read_bytes() != data:
            atomic_write(p, lambda f, data=data: f.write(data))
        os.utime(p, ns=(mtime_ns, mtime_ns))


def on_interrupt(kept: Callable[[], str]) -> None:
    """What an interrupt keeps, said by the stage: ``kept()`` is the start of its line (e.g. "3 of 5 examples x 2
    methods kept in <file>")."""
    if _current is not None:
        _current.kept = kept


def shown(path: str | Path) -> str:
    """A path relative to the working directory when inside it, as given or with its links followed (the
    interpreter of a venv, ``.venv/bin/python``, is a link to one outside it: shown as the venv's)."""
    cwd = Path.cwd().resolve()
    for candidate in (Path(os.path.abspath(path)), Path(path).resolve()):
        try:
            return str(candidate.relative_to(cwd))
        except ValueError:
            continue
    return str(path)


# Hydra's grammar: what an override value may hold unquoted (OverrideLexer.g4: ID and UNQUOTED_CHAR)
_UNQUOTED = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_/-\\+.$%*@?|")


def hydra_value(s: str) -> str:
    """``s`` as a Hydra override value: as it is when the grammar allows, else in Hydra's single quotes."""
    return s if s and set(s) <= _UNQUOTED else "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def resume_command(folder: str) -> str:
    """This command line again, with ``resume=<folder>`` (an explicit hydra.run.dir / hydra.sweep.dir already names
    the folder: then the same command)."""
    args = [a for a in sys.argv[1:] if not a.startswith("resume=")]
    if not any(a.startswith(("hydra.run.dir=", "hydra.sweep.dir=")) for a in args):
        args.append("resume=" + hydra_value(shown(folder)))
    return shlex.join([shown(sys.executable), shown(sys.argv[0]), *args])
