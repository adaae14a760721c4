"""report: aggregate run_exp jobs (a multirun folder or several runs) into one Table-1 style table with bootstrap
intervals and paired comparisons (recomputed from results.jsonl), and retrieval jobs
(mode=retrieval) into the retrieval tables, with retrieval Recall@k next to attribution Recall@10% where both ran on
the same tasks."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ctxbench.reporting.aggregate import find_jobs, table1, table_view, write_table1
from ctxbench.reporting.html import write_report_html
from ctxbench.reporting.stats import StatsSettings
from ctxbench.retrieval.report import find_retrieval_jobs, has_attribution_jobs, write_report
from ctxbench.stages.run_shards import merged_shard_runs

log = logging.getLogger(__name__)


def report_stage(cfg: DictConfig, output_dir: str | Path) -> dict:
    # Shards of a sharded run_exp are merged first (under output_dir/merged_shards/), then read like any run.
    plain, merged = merged_shard_runs(list(cfg.runs), Path(output_dir))
    runs = plain + [str(m) for m in merged]
    retrieval = find_retrieval_jobs(runs)
    attribution_runs = [r for r in runs if has_attribution_jobs(r)] if retrieval else runs
    jobs = find_jobs(attribution_runs, cfg.get("prefer_later", False), cfg.get("unfinished", False)) \
        if attribution_runs else []
    out = {}
    view = table_view(jobs, cfg.get("view")) if jobs else (cfg.get("view") or "seq")
    if jobs:
        stats = StatsSettings(**OmegaConf.to_container(cfg.stats)) if "stats" in cfg else StatsSettings()
        table = table1(jobs, view, stats)
        md_path, csv_path, md = write_table1(jobs, output_dir, view=view, stats=stats, paper=cfg.get("paper", False),
                                             table=table, caption=cfg.get("caption"),
                                             min_examples=cfg.get("min_examples", 0))
        print(md)
        log.info("%d runs -> %s, %s", len(jobs), md_path, csv_path)
        out.update(markdown=str(md_path), csv=str(csv_path))
        if cfg.get("html", False):  # a hand-made config (tests, library callers) may leave the page out
            out["html"] = str(write_report_html(jobs, table, output_dir, cfg.heatmaps))
            log.info("-> %s", out["html"])
    if retrieval:
        md_path, md = write_report(retrieval, jobs, output_dir, view=view)
        print(md)
        log.info("%d retrieval runs -> %s", len(retrieval), md_path)
        out["retrieval"] = str(md_path)
    return out
