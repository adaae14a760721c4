"""report: aggregate run_exp jobs (a multirun folder or several runs) into one Table-1 style table with bootstrap
intervals and paired comparisons (recomputed from results.jsonl), and retrieval jobs
(mode=retrieval) into the retrieval tables, with retrieval Recall@k next to attribution Recall@10% where both ran on
the same tasks."""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ctxbench.stages.conf import ReportConfig, RunConfig, stage_config
from ctxbench.core.errors import ConfigError, DataError
from ctxbench.reporting.paper import load_paper
from ctxbench.reporting.overview import overview_markdown
from ctxbench.reporting.protocol import families_markdown, variants_markdown

from ctxbench.reporting.aggregate import table1, table_view, write_table1
from ctxbench.jobs.results import find_jobs
from ctxbench.reporting.html import write_report_html
from ctxbench.reporting.results_table import MinExamples
from ctxbench.retrieval.report import find_retrieval_jobs, has_attribution_jobs, write_report
from ctxbench.stages.jobdir import accept as accept_job, shown
from ctxbench.stages.run_shards import merged_shard_runs
from ctxbench.utils.files import atomic_write_text

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def run_defaults() -> dict:
    """The run stage's settings at their schema defaults."""
    return OmegaConf.to_container(OmegaConf.structured(RunConfig), resolve=False)


def with_defaults(defaults: dict, config: dict) -> dict:
    """``config`` with the settings it lacks taken from ``defaults``, at every depth: a run written before a version
    added a setting had that setting's default behaviour, so the report's comparability check reads it so."""
    out: dict[str, Any] = dict(defaults)
    for k, v in config.items():
        d = defaults.get(k)
        out[k] = with_defaults(d, v) if isinstance(v, dict) and isinstance(d, dict) else v
    return out


def _reports(report_dirs: list[str]) -> list[tuple[str, dict]]:
    """``(folder, table1.json)`` of each Table-1 report folder."""
    reports = []
    for d in report_dirs:
        path = Path(d) / "table1.json"
        if not path.is_file():
            raise DataError("no table1.json: make the report first (bash scripts/table1.sh <variant> report)",
                            file=path)
        reports.append((str(d), json.loads(path.read_text())))
    return reports


def write_variants(report_dirs: list[str], output_dir: str | Path) -> Path:
    """``variants.md``: the Table-1 reports of several variants beside the paper's Table 1."""
    out = Path(output_dir) / "variants.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, variants_markdown(_reports(report_dirs), load_paper()))
    return out


def write_families(report_dirs: list[str], output_dir: str | Path) -> Path:
    """``families.md``: the Table-1 reports of one variant made with different models, their orderings compared (per
    task and metric; every pair in ``pairs.md`` beside it)."""
    if len(report_dirs) < 2:
        raise ConfigError(f"families: {report_dirs}: name two or more report folders to compare")
    out = Path(output_dir) / "families.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    headline, pairs = families_markdown(_reports(report_dirs))
    atomic_write_text(out, headline)
    atomic_write_text(out.parent / "pairs.md", pairs)
    return out


def write_overview(report_dirs: list[str], output_dir: str | Path) -> Path:
    """``overview.md``: every report's headline orders and control checks (``reporting.overview``)."""
    out = Path(output_dir) / "overview.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, overview_markdown(_reports(report_dirs)))
    return out


def report_stage(cfg: DictConfig, output_dir: str | Path) -> dict:
    rc: ReportConfig = stage_config(cfg, ReportConfig)
    least = MinExamples(rc.min_examples, dict(rc.min_examples_of))
    out = {}
    if rc.variants:
        accept_job()  # before each first write into the job folder (ctxbench.stages.jobdir)
        path = write_variants(rc.variants, output_dir)
        print(path.read_text())
        out["variants"] = str(path)
    if rc.families:
        accept_job()
        path = write_families(rc.families, output_dir)
        print(path.read_text())
        out["families"] = str(path)
    if rc.overview:
        accept_job()
        path = write_overview(rc.overview, output_dir)
        print(path.read_text())
        out["overview"] = str(path)
    if not rc.runs and rc.samples:
        # sampled caches, nothing explained yet (or every task kept too few rows): the funnels alone
        accept_job()
        md_path, _, md = write_table1([], output_dir, caption=rc.caption, min_examples=least, samples=rc.samples)
        print(md)
        return {**out, "markdown": str(md_path)}
    if not rc.runs:
        if out:
            return out
        raise ConfigError("runs: name the run_exp run or multirun folders to report (or variants=[report dirs], "
                          "families=[report dirs], overview=[report dirs])")
    # Shards of a sharded run_exp are merged first (under output_dir/merged_shards/), then read like any run.
    plain, merged = merged_shard_runs(rc.runs, Path(output_dir))
    runs = plain + [str(m) for m in merged]
    retrieval = find_retrieval_jobs(runs)
    attribution_runs = [r for r in runs if has_attribution_jobs(r)] if retrieval else runs
    jobs = find_jobs(attribution_runs, rc.prefer_later, rc.unfinished) if attribution_runs else []
    jobs = [replace(j, config=with_defaults(run_defaults(), j.config)) for j in jobs]
    view = table_view(jobs, rc.view) if jobs else (rc.view or "seq")
    if jobs:
        table = table1(jobs, view, rc.stats)
        accept_job()
        md_path, csv_path, md = write_table1(jobs, output_dir, view=view, stats=rc.stats, paper=rc.paper, table=table,
                                             caption=rc.caption, min_examples=least, samples=rc.samples)
        print(md)
        log.info("%d runs -> %s, %s", len(jobs), shown(md_path), shown(csv_path))
        out.update(markdown=str(md_path), csv=str(csv_path))
        if rc.html:
            out["html"] = str(write_report_html(jobs, table, output_dir, rc.heatmaps, rc.caption, least,
                                                rc.stats.min_n))
            log.info("-> %s", shown(out["html"]))
    if retrieval:
        accept_job()
        md_path, md = write_report(retrieval, jobs, output_dir, view=view)
        print(md)
        log.info("%d retrieval runs -> %s", len(retrieval), shown(md_path))
        out["retrieval"] = str(md_path)
    return out
