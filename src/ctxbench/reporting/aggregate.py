"""The multirun report: one table in the layout of the reference paper's Table 1 (rows: datasets; columns: methods x
metrics), from run_exp job dirs. Runs whose configs disagree on anything but the swept keys are refused."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

import yaml

from ctxbench.reporting.tables import direction, metric_header

# Keys that never change a result: where files live, how progress is shown, extra artefacts.
IGNORED_PREFIXES = ("paths.", "dry_run", "progress", "heatmaps", "html", "save_traces")


@dataclass
class JobRun:
    path: Path
    config: dict[str, Any]
    overrides: list[str]
    summary: dict[str, Any]

    @property
    def dataset(self) -> str:
        return self.config["dataset"]["name"]


def find_jobs(paths: Iterable[str | Path]) -> list[JobRun]:
    """Every run_exp job dir (one with ``summary.json`` and ``manifest.json``) at or below the given paths."""
    jobs = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such run or multirun folder")
        dirs = [p] if (p / "summary.json").exists() else sorted(d.parent for d in p.rglob("summary.json"))
        if not dirs:
            raise FileNotFoundError(f"{p}: no finished run_exp job (summary.json) in it")
        for d in dirs:
            manifest = json.loads((d / "manifest.json").read_text())
            if manifest.get("stage") != "run_exp":
                continue
            ov_file = d / ".hydra" / "overrides.yaml"
            overrides = yaml.safe_load(ov_file.read_text()) if ov_file.exists() else []
            jobs.append(JobRun(d, manifest["config"], list(overrides or []),
                               json.loads((d / "summary.json").read_text())))
    if not jobs:
        raise FileNotFoundError(f"no run_exp jobs found in {', '.join(map(str, paths))}")
    return jobs


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out if out or not prefix else {prefix[:-1]: {}}
    return {prefix[:-1]: json.dumps(obj, sort_keys=True) if isinstance(obj, list) else obj}


def swept_keys(jobs: list[JobRun]) -> set[str]:
    """Override keys that take more than one value across the jobs (a group override covers its whole node)."""
    values: dict[str, set[str]] = {}
    for job in jobs:
        for ov in job.overrides:
            key, _, val = ov.lstrip("+~").partition("=")
            values.setdefault(key, set()).add(val)
    for key in list(values):
        missing = sum(1 for j in jobs if not any(o.lstrip("+~").partition("=")[0] == key for o in j.overrides))
        if missing:
            values[key].add("<default>")
    return {k for k, v in values.items() if len(v) > 1}


def check_consistent(jobs: list[JobRun]) -> None:
    swept = swept_keys(jobs)
    # Datasets are the rows and methods the columns: they may always differ between runs.
    allowed = tuple(swept) + ("dataset", "attribution")
    flat = [flatten(j.config) for j in jobs]
    keys = set().union(*flat)
    bad = []
    for k in sorted(keys):
        if k.startswith(IGNORED_PREFIXES) or k == "paths":
            continue
        vals = {json.dumps(f.get(k, "<absent>"), sort_keys=True, default=str) for f in flat}
        if len(vals) > 1 and not any(k == a or k.startswith(a + ".") for a in allowed):
            bad.append(f"{k} ({', '.join(sorted(vals))})")
    if bad:
        raise ValueError("runs disagree on keys that were not swept, so their figures are not comparable: "
                         + "; ".join(bad))


def table1(jobs: list[JobRun], view: str = "seq"
           ) -> tuple[list[str], list[str], list[dict[str, Any]], dict[tuple[str, str], dict]]:
    """``(datasets, methods, metrics, cells)``: ``metrics`` are the scorers' metric descriptions (``label``,
    ``higher_is_better``) in run order, ``cells[(dataset, method)] = {label: mean, "n": examples}``."""
    check_consistent(jobs)
    cells: dict[tuple[str, str], dict] = {}
    where: dict[tuple[str, str], Path] = {}
    datasets, methods, metrics = [], [], {}
    for job in jobs:
        scorers = job.summary.get("scorers", {})
        for desc in scorers.values():
            for m in desc["metrics"]:
                metrics.setdefault(m["label"], m)
        for method, s in job.summary["methods"].items():
            key = (job.dataset, method)
            if key in cells:
                raise ValueError(f"two runs give {method} on {job.dataset}: {where[key]} and {job.path}")
            cell: dict[str, Optional[float]] = {"n": s["examples"]}
            for name, desc in scorers.items():
                for m in desc["metrics"]:
                    cell[m["label"]] = s[name][view][m["key"]]["mean"] if name in s else None
            cells[key], where[key] = cell, job.path
            if job.dataset not in datasets:
                datasets.append(job.dataset)
            if method not in methods:
                methods.append(method)
    return datasets, methods, list(metrics.values()), cells


def write_table1(jobs: list[JobRun], output_dir: str | Path, view: str = "seq") -> tuple[Path, Path, str]:
    datasets, methods, metrics, cells = table1(jobs, view)
    metrics = [m for m in metrics
               if any(cells.get((d, me), {}).get(m["label"]) is not None for d in datasets for me in methods)]
    mixed = len({m["higher_is_better"] for m in metrics}) > 1
    labels = [m["label"] for m in metrics]
    header = ["dataset (N)"] + [f"{me} {metric_header(m, mixed)}" for me in methods for m in metrics]

    def n_of(d):
        ns = {cells[(d, me)]["n"] for me in methods if (d, me) in cells}
        return "/".join(str(n) for n in sorted(ns))

    rows = []
    for d in datasets:
        row = [f"{d} ({n_of(d)})"]
        for me in methods:
            c = cells.get((d, me), {})
            row += ["–" if c.get(m) is None else f"{c[m]:.3f}" for m in labels]
        rows.append(row)
    md = "\n".join([f"Table 1 layout ({view} view; {direction(metrics)})", "",
                    "| " + " | ".join(header) + " |", "|---" * len(header) + "|",
                    *["| " + " | ".join(r) + " |" for r in rows]])
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    md_path, csv_path = out / "table1.md", out / "table1.csv"
    md_path.write_text(md + "\n", encoding="utf-8")
    with open(csv_path, "w", newline="", encoding="utf-8") as fp:
        w = csv.writer(fp)
        w.writerow(["dataset", "n"] + [f"{me}/{m}" for me in methods for m in labels])
        for d in datasets:
            w.writerow([d, n_of(d)] + ["" if cells.get((d, me), {}).get(m) is None else cells[(d, me)][m]
                                       for me in methods for m in labels])
    return md_path, csv_path, md
