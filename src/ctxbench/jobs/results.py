"""A job folder's files, named once, and the one way to find job folders.

Every stage writes into a job folder (``outputs/...`` or a sweep's sub-folder). What it holds:

- ``manifest.json``: what produced the job (stage, config, data record, versions; ``ctxbench.jobs.manifest``); the mark
of a
  job folder.
- run_exp: ``results.jsonl`` (one line per example and method, appended as they finish), ``summary.json`` and
  ``summary.md`` (written at the end: a job without ``summary.json`` is unfinished), ``shard.json`` (a finished shard),
  ``retrieval.json`` (a ``mode=retrieval`` job's results).
- sample_and_filter: ``funnel.json`` (the counts of the sampling funnel).
- report: ``table1.md``, ``table1.csv``, ``table1.json``.

Below the file names, the job model the reports read: ``JobRun`` (a run_exp job's config, overrides, summary and
result lines), ``find_jobs`` (every job below some folders, finished or not), ``label_variants`` (a method run with
other settings is another row) and ``resolve_repeats`` (a figure two jobs give is taken from the later one, or
refused).
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

import yaml
from hydra.utils import get_class

from ctxbench.core.errors import ConfigError, DataError
from ctxbench.core.jsonl import iter_jsonl
from ctxbench.metrics.faithfulness import with_deletion_set
from ctxbench.metrics.scorer import Scorer, build_scorers
from ctxbench.metrics.summary import run_summary
from ctxbench.core.part import without_neutral
from ctxbench.jobs.run_outputs import run_setting

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


# --- the job model: run_exp jobs as the reports read them ----------------------------------------------------------

log = logging.getLogger(__name__)


@dataclass
class JobRun:
    path: Path
    config: dict[str, Any]
    overrides: list[str]
    summary: dict[str, Any]
    superseded: set = field(default_factory=set)  # (method, scorer) a later run gives instead (``resolve_repeats``)
    # a job still running or stopped: (examples scored by every method so far, examples planned)
    unfinished: Optional[tuple] = None
    # the job's result lines, read once (an unfinished job's as they were when it was found, not later ones)
    lines: Optional[list] = None
    source: dict = field(default_factory=dict)  # the manifest's dataset record: where the examples were read
    # method -> the name it is reported under, when its settings differ from the first run of it (``label_variants``)
    labels: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)  # method -> what differs in those settings ("hops=3")

    @property
    def dataset(self) -> str:
        return self.config["dataset"]["name"]

    def records(self) -> list[dict]:
        """The per-example result lines of the methods in the summary (none when the job has no results file),
        without the scores of superseded (method, scorer) pairs."""
        path = self.path / RESULTS
        if self.lines is None:
            if not path.exists():
                return []
            original = {label: m for m, label in self.labels.items()}
            wanted = {original.get(m, m) for m in self.summary["methods"]}
            self.lines = [self.read_line(r) for _, r in iter_jsonl(path) if r["method"] in wanted]
        out = [dict(r) for r in self.lines]  # the caller's copies: superseded scores are blanked in them only
        for r in out:
            r["method"] = self.labels.get(r["method"], r["method"])
            for method, scorer in self.superseded:
                if r["method"] == method:
                    r[scorer] = None
        return out

    def read_line(self, record: dict) -> dict:
        """A result line as today's scorers read it: one written before the faithfulness scorer named the method's
        own deletion set gets it from the method's class (``own_deletion_set``)."""
        return with_deletion_set(record, own_deletion_set(self.config, record["method"]))

    def scores(self, method: str, scorer: str) -> bool:
        """Whether this job's figures for ``method`` include ``scorer``'s (and are not superseded)."""
        return scorer in self.summary["methods"][method] and (method, scorer) not in self.superseded

    def scorers(self) -> dict[str, Scorer]:
        """The job's scorers, rebuilt from its recorded config: they read its records as the run did."""
        return build_scorers(self.config["mode"]) if self.config.get("mode") else {}


def own_deletion_set(config: dict, method: str) -> str:
    """The deletion set the faithfulness scorer used for ``method`` under its own protocol, from its class
    (``Attributor.deletion_set``; "all" for a class that cannot be imported)."""
    target = ((config.get("attribution") or {}).get(method) or {}).get("_target_")
    return _class_deletion_set(target) if isinstance(target, str) else "all"


@functools.lru_cache(maxsize=None)
def _class_deletion_set(target: str) -> str:
    # once per class, not per result line (a report reads thousands)
    try:
        return getattr(get_class(target), "deletion_set", "all")
    except (ImportError, ValueError):  # a plugin's module no longer on the path
        return "all"


def find_jobs(paths: Iterable[str | Path], prefer_later: bool = False, unfinished: bool = False) -> list[JobRun]:
    """Every run_exp job dir (one with ``manifest.json``) at or below the given paths, in their order: the finished
    ones (``summary.json``), and with ``unfinished`` also those still running or stopped, summarised from the results
    they have written so far (otherwise they are left out with a warning). Two jobs scoring the same task and method
    with the same scorer are resolved by ``resolve_repeats``."""
    jobs, left_out = [], []
    for p in paths:
        found = []
        for job, manifest in jobs_below([p]):
            if not is_attribution_job(manifest) or manifest["config"].get("shard", {}).get("count", 1) > 1:
                continue  # other stages and retrieval; shards are merged into a run of their own before the report
            summary = _current_summary(job, manifest)
            if summary is not None:
                found.append(_job(job.dir, manifest, summary))
            elif not unfinished:
                left_out.append(job.dir)
            elif job.results.exists():
                found.append(_job(job.dir, manifest, None))
        if not found:
            hint = "; its unfinished jobs are reported with unfinished=true" if left_out and not unfinished else ""
            raise DataError(f"no finished run_exp job (summary.json) in it{hint}", file=p)
        jobs += found
    if left_out:
        log.warning("left out, unfinished (no summary.json; report them with unfinished=true): %s",
                    ", ".join(map(str, left_out)))
    label_variants(jobs)
    resolve_repeats(jobs, prefer_later)
    return jobs


def _current_summary(job: JobFiles, manifest: dict) -> Optional[dict]:
    """The job's ``summary.json``, or None while it is unfinished: none yet, or one without a method the results
    file has lines of, written when an earlier run of the folder finished and before the folder was resumed with
    more methods (its figures would hide those scored since)."""
    if not job.summary.exists():
        return None
    summary = job.read_summary()
    wanted = set(manifest["config"].get("attribution") or {})
    scored = {r["method"] for _, r in iter_jsonl(job.results, complete_only=True)} if job.results.exists() else set()
    return None if (scored & wanted) - set(summary.get("methods") or {}) else summary


def label_variants(jobs: list[JobRun]) -> None:
    """A method run with other settings than in the first run of it (in ``runs`` order) is another row, named by the
    settings that differ: Table 1's FlashTrace recall with hops=3 beside the hops=1 figure,
    ``ifr_multi_hop_both (hops=3)``. Runs of a method with equal settings stay one method (``resolve_repeats``)."""
    first: dict[str, dict] = {}
    for job in jobs:
        for method in list(job.summary["methods"]):
            settings = flatten(without_neutral((job.config.get("attribution") or {}).get(method) or {}))
            ref = first.setdefault(method, settings)
            diff = [f"{k}={settings.get(k)}" for k in sorted(set(ref) | set(settings)) if ref.get(k) != settings.get(k)]
            if diff:
                job.settings[method] = ", ".join(diff)
                job.labels[method] = f"{method} ({job.settings[method]})"
        job.summary["methods"] = {job.labels.get(m, m): v for m, v in job.summary["methods"].items()}


def _job(d: Path, manifest: dict, summary: Optional[dict]) -> JobRun:
    """The job in ``d``; ``summary`` None: an unfinished job, summarised from its results so far as the run would."""
    ov_file = d / ".hydra" / "overrides.yaml"
    overrides = yaml.safe_load(ov_file.read_text()) if ov_file.exists() else []
    # resume= names the folder a run went on in, not a setting of the job
    overrides = [o for o in overrides or [] if o.lstrip("+~").partition("=")[0] != "resume"]
    job = JobRun(d, manifest["config"], list(overrides or []), summary or {}, source=manifest.get("dataset") or {})
    if summary is None:
        config = job.config
        methods = list(config.get("attribution") or {})
        # the job may be writing its next line: only complete lines count
        records = [job.read_line(r) for _, r in iter_jsonl(d / RESULTS, complete_only=True) if r["method"] in methods]
        job.lines = records
        job.summary = run_summary(records, job.scorers(), list(run_setting(config, "views")),
                                  run_setting(config, "stats"))
        by_example: dict[str, set] = {}
        for r in records:
            by_example.setdefault(r["example_id"], set()).add(r["method"])
        complete = sum(1 for got in by_example.values() if got >= set(methods))
        job.unfinished = (complete, manifest.get("dataset", {}).get("examples"))
    return job


def resolve_repeats(jobs: list[JobRun], prefer_later: bool = False) -> None:
    """A task and method scored by the same scorer in two jobs is refused, or with ``prefer_later`` taken from the
    later job (in ``runs`` order): the earlier job's scores of it are marked superseded. Table 1 needs the second:
    FlashTrace's faithfulness with hops=1 from the sweep of every method (which scores recovery too), its recovery
    with hops=3 from a sweep of its own."""
    given: dict[tuple[str, str, str], JobRun] = {}
    for job in jobs:
        for method in job.summary["methods"]:
            for scorer, desc in job.summary.get("scorers", {}).items():
                if not job.scores(method, scorer):
                    continue
                key = (job.dataset, method, scorer)
                if key in given:
                    if not prefer_later:
                        label = desc["metrics"][0]["label"] if desc.get("metrics") else scorer
                        raise ConfigError(f"two runs give {method} on {job.dataset} ({label}): {given[key].path} and "
                                         f"{job.path}; list the run to use last and set prefer_later=true")
                    given[key].superseded.add((method, scorer))
                given[key] = job


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out if out or not prefix else {prefix[:-1]: {}}
    return {prefix[:-1]: json.dumps(obj, sort_keys=True) if isinstance(obj, list) else obj}


def unfinished_note(job: JobRun) -> str:
    """"" for a finished job, else how far an unfinished one got."""
    if not job.unfinished:
        return ""
    done, planned = job.unfinished
    return f"{done}{'' if planned is None else f' of {planned}'} examples scored by every method so far"
