"""Sharded run_exp jobs and their merge (docs/scale-out.md).

A job with ``shard.count > 1`` attributes dataset rows ``index, index + count, ...`` only, writes ``results.jsonl``,
heat maps and traces for them, and ``shard.json`` (its slice of example ids, the examples it refused) when it is done;
it writes no summary. ``merge_run`` joins the shards of one run into a job dir that holds what the unsharded run would
have written: results in dataset order, the summary files, plots and report.html. It refuses a missing, unfinished or
duplicated shard, an example in two shards, results missing for an example, and shards run under different
configurations. The report command merges the shards it finds the same way (``merged_shard_runs``).
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from omegaconf import OmegaConf

from ctxbench.core.errors import DataError
from ctxbench.utils.files import atomic_write_text, safe_filename
from ctxbench.core.jsonl import iter_jsonl
from ctxbench.jobs.manifest import write_manifest
from ctxbench.metrics.scorer import build_scorers
from ctxbench.jobs.run_outputs import run_setting
from ctxbench.metrics.stats import StatsSettings
from ctxbench.reporting.tables import write_job_summary
from ctxbench.jobs.results import MANIFEST, RESULTS, SHARD, jobs_below
from ctxbench.core.shards import interleave
from ctxbench.stages.jobdir import accept as accept_job

log = logging.getLogger(__name__)

COPIED_DIRS = ("heatmaps", "heatmap_data")  # one file per example: shards never write the same file


def write_shard_record(output_dir: Path, index: int, count: int, n_examples: int, example_ids: list[str],
                       refused_ids: list[str], refused: list[str]) -> Path:
    """Written last by a shard job: its presence says the shard finished."""
    return atomic_write_text(output_dir / SHARD, json.dumps({
        "index": index, "count": count, "n_examples": n_examples, "example_ids": example_ids,
        "refused_ids": refused_ids, "refused": refused}, indent=1) + "\n")


def run_config(manifest: dict) -> dict:
    """The configuration that makes shards of one run comparable: everything but the shard, merge and resume
    settings."""
    return {k: v for k, v in manifest["config"].items() if k not in ("shard", "merge", "resume")}


def find_shard_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Shard job dirs at or below ``paths``: finished ones (``shard.json``) and unfinished ones (a sharded manifest)."""
    found: list[Path] = []
    for job, manifest in jobs_below(paths):
        shard = manifest.get("config", {}).get("shard") or {}
        retrieval = (manifest.get("dataset") or {}).get("kind") == "retrieval"  # its shards join in the cache
        if manifest.get("stage") == "run_exp" and shard.get("count", 1) > 1 and not retrieval:
            found.append(job.dir)
    return found


def group_shard_dirs(dirs: list[Path]) -> list[list[Path]]:
    """Shard dirs grouped by run (same configuration but the shard settings), in first-seen order."""
    groups: dict[str, list[Path]] = {}
    for d in dirs:
        key = json.dumps(run_config(json.loads((d / MANIFEST).read_text(encoding="utf-8"))), sort_keys=True)
        groups.setdefault(key, []).append(d)
    return list(groups.values())


@dataclass
class _Shards:
    """The finished shards of one run, checked against each other (``_read_shards``)."""

    first: Path
    config: dict
    manifest: dict  # the first shard's
    count: int
    dirs: dict[int, Path]  # by shard index
    slices: dict[int, list[str]]  # the example ids of each shard
    refused_ids: set[str]
    refused: list[str]
    n_examples: int


def same_settings(fingerprints: dict[str, str], path: Path, remedy: str) -> Callable[[dict, int], None]:
    """A check of one result line (and its line number): a line of one of these methods made under other settings
    than ``fingerprints`` says is refused, naming the file, line and field, and ``remedy``."""
    def check(rec: dict, lineno: int) -> None:
        method = rec.get("method")
        if method in fingerprints and rec.get("config") != fingerprints[method]:
            raise DataError(f"written for method {method!r} under another configuration ({rec.get('config')} != "
                            f"{fingerprints[method]}); {remedy}", file=path, line=lineno, field="config")

    return check


def base_lines(base: str | Path, fingerprints: Optional[dict[str, str]] = None) -> dict[tuple[str, str], dict]:
    """The result lines of a task folder ``base`` (``<base>/results.jsonl``), by (example id, method): what a job
    with ``base=`` does not score again and what its merge starts from. Refused: no results file, a line twice, and
    with ``fingerprints`` a line of one of those methods made under other settings."""
    path = Path(base) / RESULTS
    if not path.is_file():
        raise DataError(f"base={base}: no {RESULTS} there (the task folder whose lines a split lane starts from)",
                        file=path)
    lines: dict[tuple[str, str], dict] = {}
    for lineno, rec in iter_jsonl(path, complete_only=True):
        key = (rec["example_id"], rec["method"])
        if key in lines:
            raise DataError(f"example {key[0]!r}, method {key[1]!r} twice", file=path, line=lineno)
        if fingerprints:
            same_settings(fingerprints, path, "a base must hold the run's own settings")(rec, lineno)
        lines[key] = rec
    return lines


def merge_run(shard_dirs: list[Path], output_dir: str | Path, *, stats: Optional[StatsSettings] = None,
              base: Optional[str | Path] = None) -> dict:
    """Join the shards of one run (module doc) into ``output_dir``, after the lines of the task folder ``base`` when
    given (the shards then hold what it lacked); returns the summary as ``run_stage`` does."""
    from ctxbench.reporting.html import write_run_html

    output_dir = Path(output_dir)
    if not shard_dirs:
        raise DataError("no sharded run_exp job (a job dir with shard.count > 1) found to merge", file=output_dir)
    shards = _read_shards(shard_dirs)
    order = interleave(shards.slices, shards.count, shards.n_examples, where=str(shards.first.parent))
    position = {eid: i for i, eid in enumerate(order)}
    methods = list(shards.config["attribution"])
    records = _merged_records(shards, order, position, methods, base_lines(base) if base else {},
                              Path(base) / RESULTS if base else None)
    accept_job()  # every check passed: the job folder is written from here on (ctxbench.stages.jobdir)
    output_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output_dir / RESULTS, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    dirs = [d for _, d in sorted(shards.dirs.items())]
    for d in dirs:
        for sub in COPIED_DIRS:
            if (d / sub).is_dir():
                shutil.copytree(d / sub, output_dir / sub, dirs_exist_ok=True)
    _merge_traces(dirs, output_dir, position)
    config = shards.config
    manifest = {**shards.manifest, "config": {**config, "shard": {"index": 0, "count": 1}},
                "merged_from": [str(d) for d in dirs]}
    write_manifest(output_dir, manifest)
    title = f"run_exp: {manifest['dataset']['name']}, {config['model']['name']}, {shards.n_examples} examples"
    summary = write_job_summary(output_dir, methods, build_scorers(OmegaConf.create(config).mode),
                                list(run_setting(config, "views")), title=title, refused=shards.refused,
                                stats=stats or run_setting(config, "stats"))
    if run_setting(config, "html"):
        write_run_html(output_dir, title, run_setting(config, "heatmaps"))
    log.info("merged %d shards (%d examples) into %s", shards.count, shards.n_examples, output_dir)
    return summary


def _read_shards(shard_dirs: list[Path]) -> _Shards:
    """Every shard's manifest and record, refused unless all ran under one configuration, finished, and are the
    shards 0..count-1 of one run, each once."""
    manifests = {d: json.loads((d / MANIFEST).read_text(encoding="utf-8")) for d in shard_dirs}
    first = shard_dirs[0]
    config = run_config(manifests[first])
    count = manifests[first]["config"]["shard"]["count"]
    shards = _Shards(first, config, manifests[first], count, {}, {}, set(), [], 0)
    for d in shard_dirs:
        other = run_config(manifests[d])
        if other != config:
            keys = sorted(k for k in set(config) | set(other) if config.get(k) != other.get(k))
            raise DataError(f"run under another configuration than {first} (differs in {', '.join(keys)})",
                            file=d / MANIFEST)
        if not (d / SHARD).exists():
            raise DataError(f"shard {manifests[d]['config']['shard']['index']} of {count} is unfinished (no "
                            f"{SHARD}); rerun it in the same dir", file=d)
        rec = json.loads((d / SHARD).read_text(encoding="utf-8"))
        if rec["count"] != count:
            raise DataError(f"shard of {rec['count']}, the others of {count}", file=d / SHARD)
        if rec["index"] in shards.dirs:
            raise DataError(f"shard {rec['index']} of {count} twice: {shards.dirs[rec['index']]} and {d}",
                            file=d / SHARD)
        shards.dirs[rec["index"]] = d
        shards.slices[rec["index"]] = rec["example_ids"]
        shards.refused_ids |= set(rec["refused_ids"])
        shards.refused += rec["refused"]
        shards.n_examples = rec["n_examples"]
    return shards


def _merged_records(shards: _Shards, order: list[str], position: dict[str, int], methods: list[str],
                    base: dict[tuple[str, str], dict], base_file: Optional[Path]) -> list[dict]:
    """The base's and every shard's result lines in the run's order (example, then method). Refused: an example
    outside its shard's slice or the run, a result in the base and a shard both, a method's lines under two
    configurations, and a result missing (of an example not refused), naming the shard to rerun."""
    for (eid, m), rec in base.items():
        if eid not in position or m not in methods:
            raise DataError(f"example {eid!r}, method {m!r} is not one of the merged run's", file=base_file)
    records: dict[tuple[str, str], dict] = dict(base)
    made_with: dict[str, tuple[str, Path]] = {r["method"]: (r.get("config"), base_file) for r in base.values()}
    for index, d in sorted(shards.dirs.items()):
        mine = set(shards.slices[index])
        for lineno, rec in iter_jsonl(d / RESULTS) if (d / RESULTS).exists() else []:
            key = (rec["example_id"], rec["method"])
            if rec["example_id"] not in mine:
                raise DataError(f"example {rec['example_id']!r} is not in shard {index}'s slice", file=d / RESULTS,
                                line=lineno)
            if key in base:
                raise DataError(f"example {key[0]!r}, method {key[1]!r} is in the base ({base_file}) too",
                                file=d / RESULTS, line=lineno)
            config, where = made_with.setdefault(rec["method"], (rec.get("config"), d / RESULTS))
            if rec.get("config") != config:
                raise DataError(f"method {rec['method']!r} made under other settings than in {where} "
                                f"({rec.get('config')} != {config})", file=d / RESULTS, line=lineno, field="config")
            records[key] = rec
    for eid in order:
        for m in methods:
            if eid not in shards.refused_ids and (eid, m) not in records:
                index = position[eid] % shards.count
                raise DataError(f"no result for example {eid!r}, method {m!r}; rerun shard {index}",
                                file=shards.dirs[index] / RESULTS)
    return sorted(records.values(), key=lambda r: (position[r["example_id"]], methods.index(r["method"])))


def _merge_traces(dirs: list[Path], output_dir: Path, position: dict[str, int]) -> None:
    """Trace files per example are copied; each method's manifest.jsonl lines are joined in dataset order."""
    lines: dict[str, list[dict[str, Any]]] = {}
    for d in dirs:
        for method_dir in sorted((d / "traces").glob("*")) if (d / "traces").is_dir() else []:
            for f in method_dir.iterdir():
                if f.name != "manifest.jsonl":
                    (output_dir / "traces" / method_dir.name).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, output_dir / "traces" / method_dir.name / f.name)
            if (method_dir / "manifest.jsonl").exists():
                lines.setdefault(method_dir.name, []).extend(
                    obj for _, obj in iter_jsonl(method_dir / "manifest.jsonl"))
    for method, objs in lines.items():
        objs.sort(key=lambda o: position[o["example_id"]])
        atomic_write_text(output_dir / "traces" / method / "manifest.jsonl",
                          "".join(json.dumps(o) + "\n" for o in objs))


def merged_shard_runs(runs: list[str | Path], output_dir: Path) -> tuple[list[str], list[Path]]:
    """For the report command: the paths of ``runs`` that still hold unsharded jobs, and one merged job dir (under
    ``output_dir/merged_shards/``) per sharded run found in them."""
    shard_dirs = find_shard_dirs(runs)
    if not shard_dirs:
        return [str(r) for r in runs], []
    shard_set = set(shard_dirs)
    plain = [str(r) for r in runs if any(job.dir not in shard_set and manifest.get("stage") == "run_exp"
                                         for job, manifest in jobs_below([r]))]
    merged = []
    for group in group_shard_dirs(shard_dirs):
        name = safe_filename(f"{group[0].parent.name}_{group[0].name}")
        target = Path(output_dir) / "merged_shards" / name
        merge_run(group, target)
        ov = group[0] / ".hydra" / "overrides.yaml"
        if ov.exists():  # the report names a job by its overrides: the shard settings do not name the run
            import yaml

            kept = [o for o in (yaml.safe_load(ov.read_text()) or []) if not o.lstrip("+~").startswith("shard.")]
            (target / ".hydra").mkdir(exist_ok=True)
            (target / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(kept))
        merged.append(target)
    return plain, merged
