"""Files the tests write and read: JSONL rows, whole folders compared byte for byte, results records, RULER data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Optional

# One RULER-format row with its evidence span: the smallest task file a stage accepts.
RULER_LINE = {"index": 0, "input": "Noise. One of the special magic numbers for k is: 1234567.\nWhat is it?",
              "outputs": ["1234567"], "answer_prefix": " Answer:",
              "needle_spans": [{"span": [7, 58], "sentence": "One of the special magic numbers for k is: 1234567."}]}


def write_jsonl(path: Path, rows: Iterable[Any]) -> Path:
    """One line per row: a dict as JSON, a string as it is (a line made by hand, a broken one); the folder is made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def write_ruler_task(data_dir: Path, task: str, rows: Iterable[Any] = (RULER_LINE,), length: int = 512) -> Path:
    """A RULER task file where the stages look for it (``<data_dir>/ruler_multihop/<length>/<task>/``)."""
    return write_jsonl(Path(data_dir) / "ruler_multihop" / str(length) / task / "validation.jsonl", rows)


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path: two folders are equal when these are."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def without_timings(obj):
    """A results record (or a part of one) without its measured fields, which differ per run: timings (``*_s``,
    ``*timings``) and the cost ledger's peak memory (``peak_mib``; its pass counts stay)."""
    if isinstance(obj, dict):
        return {k: without_timings(v) for k, v in obj.items()
                if not (k.endswith("_s") or k.endswith("timings") or k == "peak_mib")}
    if isinstance(obj, list):
        return [without_timings(v) for v in obj]
    return obj


def without_time_section(table1_md: str) -> str:
    """A Table-1 page without its last section, the time per stage (timings, and the run folders' names)."""
    return table1_md.split("\n## Time per stage")[0]


def write_job_folder(job: Path, config: dict, overrides: Iterable[str] = (), records: Optional[Iterable[dict]] = None,
                     summary: Optional[dict] = None, dataset: Optional[dict] = None) -> Path:
    """A run_exp job folder as the reports read it: ``manifest.json`` (``config``, and the loaded ``dataset`` when
    given), ``.hydra/overrides.yaml``, and ``results.jsonl`` / ``summary.json`` when given."""
    (job / ".hydra").mkdir(parents=True)
    manifest = {"stage": "run_exp", "config": config, **({"dataset": dataset} if dataset is not None else {})}
    (job / "manifest.json").write_text(json.dumps(manifest))
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    if records is not None:
        (job / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if summary is not None:
        (job / "summary.json").write_text(json.dumps(summary))
    return job


def whole_report(written) -> str:
    """``write_table1``'s table1.md text and the pairs.md beside it: the page a reader opens, then the rest."""
    md_path, _, md = written
    return md + (md_path.parent / "pairs.md").read_text(encoding="utf-8")


def report_cells(values: dict) -> dict:
    """``{(task, method): cell}`` as the report builds them, with the means of ``values[task][label][method]``
    (``{example id: value}``)."""
    import numpy as np

    cells = {}
    for task, by_label in values.items():
        for label, by in by_label.items():
            for me, per in by.items():
                c = cells.setdefault((task, me), {"method": me, "setting": "", "runs_n": {len(per)}, "stats": {}})
                x = np.array(list(per.values()))
                c["stats"][label] = {"mean": float(x.mean()), "std": float(x.std()), "n": len(x), "ci_low": None,
                                     "ci_high": None}
                c[label] = float(x.mean())
    return cells
