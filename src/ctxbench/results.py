"""A job folder's files, named once, and the one way to find job folders.

Every stage writes into a job folder (``outputs/...`` or a sweep's sub-folder). What it holds:

- ``manifest.json``: what produced the job (stage, config, data record, versions; ``ctxbench.manifest``); the mark of a
  job folder.
- run_exp: ``results.jsonl`` (one line per example and method, appended as they finish), ``summary.json`` and
  ``summary.md`` (written at the end: a job without ``summary.json`` is unfinished), ``shard.json`` (a finished shard),
  ``retrieval.json`` (a ``mode=retrieval`` job's results).
- sample_and_filter: ``funnel.json`` (the counts of the sampling funnel).
- report: ``table1.md``, ``table1.csv``, ``table1.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from ctxbench.errors import DataError

MANIFEST = "manifest.json"
RESULTS = "results.jsonl"
SUMMARY = "summary.json"
SUMMARY_MD = "summary.md"
SHARD = "shard.json"
FUNNEL = "funnel.json"
RETRIEVAL_JSON = "retrieval.json"  # a mode=retrieval job's results (ctxbench.retrieval.report)
RETRIEVAL_MD = "retrieval.md"


@dataclass(frozen=True)
class JobFiles:
    """The files of one job folder."""

    dir: Path

    @property
    def manifest(self) -> Path:
        return self.dir / MANIFEST

    @property
    def results(self) -> Path:
        return self.dir / RESULTS

    @property
    def summary(self) -> Path:
        return self.dir / SUMMARY

    @property
    def summary_md(self) -> Path:
        return self.dir / SUMMARY_MD

    @property
    def shard(self) -> Path:
        return self.dir / SHARD

    def read_manifest(self) -> dict:
        return json.loads(self.manifest.read_text(encoding="utf-8"))

    def read_summary(self) -> dict:
        return json.loads(self.summary.read_text(encoding="utf-8"))


def is_attribution_job(manifest: dict) -> bool:
    """A run_exp job that attributes (``mode=retrieval`` jobs are run_exp jobs too, with retrieval data)."""
    return manifest.get("stage") == "run_exp" and manifest.get("dataset", {}).get("kind") != "retrieval"


def job_dirs(path: str | Path, must_exist: bool = True) -> Iterator[JobFiles]:
    """The job folder ``path`` itself when it is one, else every job folder below it, in sorted order."""
    p = Path(path)
    if must_exist and not p.exists():
        raise DataError("no such run or multirun folder", file=p)
    if (p / MANIFEST).is_file():
        yield JobFiles(p)
        return
    for m in sorted(p.rglob(MANIFEST)):
        yield JobFiles(m.parent)


def jobs_below(paths: Iterable[str | Path]) -> Iterator[tuple[JobFiles, dict]]:
    """``(job, its manifest)`` for every job folder at or below each of ``paths``, in their order."""
    for p in paths:
        for job in job_dirs(p):
            yield job, job.read_manifest()
