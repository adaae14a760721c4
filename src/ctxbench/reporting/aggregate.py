"""The multirun report in the layout of the FlashTrace paper's Table 1 (one row per task with its
N, the metric columns RISE, MAS, RISE+AP, Recall@10%; here one row per task and method), each figure with its bootstrap
interval, then the paired comparisons between methods on each task, from run_exp job dirs. Intervals and comparisons
are recomputed from each job's ``results.jsonl`` with the report's ``stats`` settings. Runs whose configs disagree on
anything but the swept keys are refused. The jobs are read through ``ctxbench.jobs.results`` (``find_jobs``); each
section is a ``Table`` and the pages (table1.md, pairs.md) are rendered from ``table1.md.j2`` and ``pairs.md.j2``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Optional

from ctxbench.core.errors import ConfigError
from ctxbench.metrics.scorer import Scorer
from ctxbench.metrics.stats import StatsSettings
from ctxbench.metrics.summary import compare, summarize
from ctxbench.core.part import without_neutral
from ctxbench.reporting.controls import (MARK, MARK_BETTER, any_control, control_rows, controls_table, example_values,
                                         is_control, legend, marks, verdict)
from ctxbench.reporting.curves import deletion_curve_plots
from ctxbench.reporting.figures import deletion_set_chart, interval_chart
from ctxbench.reporting.paper import load_paper, ordering_rows, ordering_table
from ctxbench.reporting.protocol import (attribution_time_table, budget_rows, budget_table, cost_rows, cost_table,
                                         deletion_set_names, deletion_set_rows, deletion_set_table,
                                         sampling_time_table, source_rows, source_table, time_rows)
from ctxbench.reporting.render import csv_text, render_page
from ctxbench.reporting.results_table import (MIN_STATS, MinExamples, Table, common_examples, comparisons_table,
                                              direction, most_common_count, rows_from_cells, shown_metrics,
                                              table1_means, table1_table, task_comparison_tables, too_few_rows,
                                              without_task_column)
from ctxbench.jobs.manifest import NEUTRAL_PREFIXES
from ctxbench.jobs.results import JobRun, flatten, unfinished_note
from ctxbench.utils.files import atomic_write_text

FIGURES = "figures"  # beside table1.md: one chart per task (reporting.figures), inlined in report.html

# The headline table's columns (table1.md), by metric key: the rest of the figures are in pairs.md.
# Every row is scored under one protocol there: RISE / MAS under the common deletion sets (all prompt tokens, then the
# non-stop ones); each method's own set, the paper's protocol (FlashTrace alone under the non-stop set), is in pairs.md.
HEADLINE_KEYS = ("RISE@all", "MAS@all", "RISE@nonstop", "MAS@nonstop", "recall", "lds", "drop@1", "drop@3", "drop@5")



def table_view(jobs: list[JobRun], requested: Optional[str] = None) -> str:
    """The token view whose figures fill the table: ``requested`` (refused when a run did not score it), else seq when
    every run scored it (a default run scores seq, row and rec), else the one view every run scored (Table 1: row)."""
    scored = [(j, set(j.summary.get("views") or j.config.get("views") or ())) for j in jobs]
    scored = [(j, v) for j, v in scored if v]  # a hand-made summary may not say: it does not narrow the choice
    if requested:
        for job, views in scored:
            if requested not in views:
                raise ConfigError(f"view: {job.path} scored the views {', '.join(sorted(views))}, not {requested!r}")
        return requested
    common = set.intersection(*(v for _, v in scored)) if scored else {"seq"}
    if "seq" in common or len(common) == 1:
        return "seq" if "seq" in common else common.pop()
    raise ConfigError("view: the runs share no single view to report "
                      f"({'none' if not common else ', '.join(sorted(common))}); set view=<one of their views>")


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
    flat = [flatten(without_neutral(j.config)) for j in jobs]
    keys = set().union(*flat)
    bad = []
    for k in sorted(keys):
        if k.startswith(NEUTRAL_PREFIXES) or k == "paths":
            continue
        vals = {json.dumps(f.get(k, "<absent>"), sort_keys=True, default=str) for f in flat}
        if len(vals) > 1 and not any(k == a or k.startswith(a + ".") for a in allowed):
            bad.append(f"{k} ({', '.join(sorted(vals))})")
    if bad:
        raise ConfigError("runs disagree on keys that were not swept, so their figures are not comparable: "
                         + "; ".join(bad))


def by_dataset(jobs: list[JobRun]) -> dict[str, tuple[list[dict], dict[str, Scorer]]]:
    """``{dataset: (records, scorers)}`` over the jobs of each dataset that have a results file (jobs running other
    methods on one task pool their records)."""
    out: dict[str, tuple[list[dict], dict[str, Scorer]]] = {}
    for job in jobs:
        records = job.records()
        if not records:
            continue
        recs, scorers = out.setdefault(job.dataset, ([], {}))
        recs += records
        scorers.update(job.scorers())
    return out


def table1(jobs: list[JobRun], view: str = "seq", stats: Optional[StatsSettings] = None
           ) -> tuple[list[str], list[str], list[dict[str, Any]], dict[tuple[str, str], dict]]:
    """``(datasets, methods, metrics, cells)``: ``metrics`` are the scorers' metric descriptions (``label``,
    ``higher_is_better``) in run order, ``cells[(dataset, method)] = {label: mean, "runs_n": {examples of each run},
    "stats": {label: {mean, std, n, ci_low, ci_high}}, "method": the method, "setting": its setting label or ""}``
    (the ``method`` key of ``cells`` is the name of the row: the method with its setting label, ``label_variants``);
    ``stats`` figures are recomputed from results.jsonl with ``stats`` when given and the job has the file, else
    taken from summary.json."""
    check_consistent(jobs)
    cells: dict[tuple[str, str], dict] = {}
    datasets, methods, metrics = [], [], {}
    for job in jobs:
        for desc in _descriptions(job).values():
            for m in desc["metrics"]:
                metrics.setdefault(m["label"], m)
        for method in _add_job_cells(cells, job, view):
            datasets += [job.dataset] if job.dataset not in datasets else []
            methods += [method] if method not in methods else []
    if stats is not None:
        _recompute_stats(cells, jobs, view, stats)
    return datasets, methods, list(metrics.values()), cells


def _descriptions(job: JobRun) -> dict[str, dict]:
    """The job's scorers described as today's code reads its records (a metric added since the run, e.g. a deletion
    set's figures derived from the main ones, is a column too), else as its summary.json says."""
    try:
        built = job.scorers()
    except ConfigError:  # a scorer whose settings today's code refuses: its own record of itself
        built = {}
    return {n: sc.describe() for n, sc in built.items()} or job.summary.get("scorers", {})


def _add_job_cells(cells: dict[tuple[str, str], dict], job: JobRun, view: str) -> list[str]:
    """One job's figures into ``cells``; the methods it gave a row. Runs of one task and method with different modes
    fill one row (Table 1: faithfulness with hops=1, recovery with hops=3, two sweeps); a scorer given by two runs was
    resolved by ``find_jobs``."""
    scorers = _descriptions(job)
    filled = []
    for method, s in job.summary["methods"].items():
        if any((method, n) in job.superseded for n in scorers) and not any(job.scores(method, n) for n in scorers):
            continue  # every figure this run had of the method is taken from a later run: its N does not count
        origin = next((m for m, label in job.labels.items() if label == method), method)
        cell = cells.setdefault((job.dataset, method), {"runs_n": set(), "stats": {}, "method": origin,
                                                        "setting": job.settings.get(origin, "")})
        for name, desc in scorers.items():
            for m in desc["metrics"]:
                got = s.get(name, {}).get(view, {}).get(m["key"]) if job.scores(method, name) else None
                if got is not None:
                    cell[m["label"]] = got["mean"]
                    cell["stats"][m["label"]] = got
                else:
                    cell.setdefault(m["label"], None)
        cell["runs_n"].add(s["examples"])  # a joined row's runs may have scored different numbers of examples
        filled.append(method)
    return filled


def _recompute_stats(cells: dict[tuple[str, str], dict], jobs: list[JobRun], view: str,
                     stats: StatsSettings) -> None:
    """The cells' figures recomputed from the jobs' results.jsonl with the report's ``stats`` settings."""
    for dataset, (records, scorers) in by_dataset(jobs).items():
        for method, s in summarize(records, scorers, [view], stats).items():
            if (dataset, method) not in cells:
                continue
            for name, scorer in scorers.items():
                if name in s:
                    for m in scorer.metrics():
                        got = s[name][view][m.key]
                        cell = cells[(dataset, method)]
                        if got["n"] or cell.get(m.label) is None:  # a figure no record of these jobs has stays out
                            cell["stats"][m.label], cell[m.label] = got, got["mean"]


def task_n(cells: dict[tuple[str, str], dict], dataset: str, methods: list[str]) -> Optional[int]:
    """The examples most of a task's methods were scored on (the larger count on a tie; a method's count: the
    largest of its joined runs), None when no method has a row there."""
    return most_common_count(max(cells[(dataset, me)]["runs_n"]) for me in methods
                             if (dataset, me) in cells and cells[(dataset, me)]["runs_n"])


def comparisons(jobs: list[JobRun], view: str, stats: StatsSettings) -> list[dict[str, Any]]:
    """Paired comparisons between the methods of each dataset (rows of ``metrics.summary.compare`` with
    ``dataset``), from the jobs' results.jsonl."""
    return [{"dataset": dataset, **row} for dataset, (records, scorers) in by_dataset(jobs).items()
            for row in compare(records, scorers, [view], stats)]


def ranked_cells(cells: dict[tuple[str, str], dict], least: MinExamples) -> dict[tuple[str, str], dict]:
    """``cells`` with each figure the report does not rank (``MinExamples.ranked``: no mean, or on fewer examples
    than its method's minimum, shown as "too few (n)") set to None, so the orderings built from the cells skip it as
    the charts and the controls check do."""
    return {key: {**cell, **{label: None for label in cell["stats"] if least.ranked(cell, label) is None}}
            for key, cell in cells.items()}


def report_models(jobs: list[JobRun], sources: list[dict[str, Any]]) -> list[str]:
    """The models a report's figures come from; a report that explained nothing (every sampling stage kept too few)
    names the models that wrote its caches, so a families page still knows whose report it is."""
    ran = {j.config.get("model", {}).get("name") or "" for j in jobs} - {""}
    return sorted(ran or {s.get("model") or "" for s in sources} - {""})


def write_table1(jobs: list[JobRun], output_dir: str | Path, view: str = "seq",
                 stats: Optional[StatsSettings] = None, paper: bool = False,
                 table: Optional[tuple] = None, caption: Optional[str] = None,
                 min_examples: int | MinExamples = 0,
                 samples: Iterable[str | Path] = ()) -> tuple[Path, Path, str]:
    """``table1.md`` (``caption``; per task one table of the methods and controls over the headline metrics, RISE,
    MAS, Recall, LDS and top-k drop, with intervals and the controls' marks, and its verdict; the controls check,
    where the targets came from, the recall budget and the time each stage took), ``pairs.md`` (every figure, the
    faithfulness orderings by deletion set, the paired comparisons and, with ``paper``, the order of the methods
    against the paper's Table 1), ``pairs.csv`` (the comparisons), ``table1.csv`` (one row per dataset: means per
    method/metric) and ``table1.json`` (all of it). A cell scored on fewer than ``min_examples`` examples (its
    method's, ``MinExamples``) is not filled (the table says so); the caches in the ``samples`` folders that no run
    explained are listed with their funnels.
    ``table``: ``table1(jobs, view, stats)`` when the caller already has it."""
    r = _gather(jobs, view, stats or StatsSettings(), MinExamples.of_value(min_examples), paper, caption,
                table or table1(jobs, view, stats or StatsSettings()), list(samples))
    out = Path(output_dir)
    md, pairs = _table1_page(r, out), _pairs_page(r, out)
    out.mkdir(parents=True, exist_ok=True)
    md_path, csv_path = out / "table1.md", out / "table1.csv"
    atomic_write_text(md_path, md)
    atomic_write_text(out / "pairs.md", pairs)
    atomic_write_text(out / "pairs.csv", csv_text(comparisons_table(r.comps)))
    atomic_write_text(csv_path, csv_text(table1_means(r.rows, r.datasets, r.methods, [m["label"] for m in r.metrics],
                                                         r.n_of)))
    atomic_write_text(out / "table1.json", json.dumps(_table1_json(r), indent=2) + "\n")
    return md_path, csv_path, md


@dataclass
class _Report:
    """A Table-1 report's sections, computed once (``_gather``) and laid out by the pages and table1.json."""

    jobs: list[JobRun]
    view: str
    stats: StatsSettings
    least: MinExamples
    paper: bool
    caption: Optional[str]
    datasets: list[str]
    methods: list[str]
    described: list[dict[str, Any]]  # every metric the runs describe
    cells: dict[tuple[str, str], dict]
    rows: list  # the cells as ResultRows
    metrics: list[dict[str, Any]]  # the metrics some method has a figure of: the columns
    comps: list[dict[str, Any]]
    ranked: dict[tuple[str, str], dict]  # the cells the orderings rank (ranked_cells)
    orderings: Optional[list[dict[str, Any]]]
    sources: list[dict[str, Any]]
    by_set: list[dict[str, Any]]
    pooled: dict[str, tuple[list[dict], dict]]
    budgets: list[dict[str, Any]]
    checks: list[dict[str, Any]]
    times: list[dict[str, Any]]
    costs: list[dict[str, Any]]

    def n_of(self, dataset: str) -> str:
        return task_n(self.cells, dataset, self.methods)

    @property
    def headline(self) -> list[dict[str, Any]]:
        return headline_metrics(self.metrics, self.datasets, self.methods, self.cells, self.least)


def headline_metrics(metrics: list[dict[str, Any]], datasets: list[str], methods: list[str],
                     cells: dict[tuple[str, str], dict], least: MinExamples) -> list[dict[str, Any]]:
    """table1.md's columns, and the family the controls are checked on: the headline metrics (``HEADLINE_KEYS``)
    that some task compares at least two rows on (a deletion set only FlashTrace was scored under compares nothing:
    the gold faith lane predates the common sets); the rest are in pairs.md."""
    def compared(label: str) -> bool:
        return any(sum(1 for me in methods if least.ranked(cells.get((d, me)), label) is not None) > 1
                   for d in datasets)

    head = [m for m in metrics if m.get("key") in HEADLINE_KEYS]
    return [m for m in head if compared(m["label"])] or head or metrics


def _gather(jobs: list[JobRun], view: str, stats: StatsSettings, least: MinExamples, paper: bool,
            caption: Optional[str], table: tuple, samples: list) -> _Report:
    datasets, methods, described, cells = table
    rows = rows_from_cells(datasets, methods, described, cells, view)
    metrics = shown_metrics(rows, described)
    comps = comparisons(jobs, view, stats)
    paper_figures = load_paper()
    ranked = ranked_cells(cells, least)
    pooled = by_dataset(jobs)
    return _Report(
        jobs=jobs, view=view, stats=stats, least=least, paper=paper, caption=caption, datasets=datasets,
        methods=methods, described=described, cells=cells, rows=rows, metrics=metrics, comps=comps, ranked=ranked,
        orderings=ordering_rows(datasets, methods, metrics, ranked, comps, paper_figures) if paper else None,
        sources=source_rows(jobs, samples), by_set=deletion_set_rows(datasets, methods, ranked, comps, paper_figures),
        pooled=pooled, budgets=budget_rows({d: recs for d, (recs, _) in pooled.items()}),
        checks=control_rows(datasets, methods, headline_metrics(metrics, datasets, methods, cells, least), cells,
                            {d: example_values(recs, scorers, view) for d, (recs, scorers) in pooled.items()},
                            least, stats),
        times=time_rows(jobs), costs=cost_rows(jobs))


def _table1_page(r: _Report, out: Path) -> str:
    """table1.md (``table1.md.j2``), and each task's charts in ``out/figures``."""
    marked = marks(r.checks)
    tasks = []
    labels = [m["label"] for m in r.headline]
    for d in r.datasets:
        t = table1_layout([d], r.methods, r.headline, r.cells, r.least, r.n_of, r.view, marked, r.stats.min_n)
        chart = interval_chart(d, r.methods, r.headline, r.cells, r.least, out / FIGURES, is_control)
        if d in r.pooled:  # the task's mean deletion curve per method, over every run's records (report.html)
            deletion_curve_plots(r.pooled[d][0], [r.view], out / FIGURES, task=d)
        rows = rows_from_cells([d], r.methods, r.headline, r.cells, r.view)
        tasks.append({"name": d, "n": common_examples(rows, d, labels, r.stats.min_n),
                      "too_few": too_few_rows(rows, d, labels, r.stats.min_n), "table": without_task_column(t),
                      "verdict": verdict(d, r.checks), "chart": chart.name if chart else None})
    return render_page(
        "table1.md.j2", caption=r.caption, view=r.view, level=r.stats.level, legend=legend(r.stats.min_n),
        min_n=r.stats.min_n,
        direction=direction(r.headline), more=[m["label"] for m in r.metrics if m not in r.headline],
        unfinished=[(j.path, unfinished_note(j)) for j in r.jobs if j.unfinished], tasks=tasks, least=r.least,
        # ContextCite fits its weights to the target under random sentence masks, which is what LDS measures
        lds_fitted=[m for m in r.methods if m.split(" (")[0] == "context_cite"]
        if any(m["label"] == "LDS" for m in r.metrics) else [],
        sources=source_table(r.sources, r.least), budget=budget_table(r.budgets) if r.budgets else None,
        sampling_time=sampling_time_table(r.sources) if r.times else None,
        attribution_time=attribution_time_table(r.times) if r.times else None, cost=cost_table(r.costs))


def _pairs_page(r: _Report, out: Path) -> str:
    """pairs.md (``pairs.md.j2``), and each task's slope chart of the deletion sets in ``out/figures``."""
    set_charts = [p for p in (deletion_set_chart(d, r.methods, r.ranked, out / FIGURES) for d in r.datasets)
                  if p is not None]
    every = table1_layout(r.datasets, r.methods, r.described, r.cells, r.least, r.n_of, r.view, marks(r.checks),
                          r.stats.min_n)
    return render_page(
        "pairs.md.j2", caption=r.caption, view=r.view, level=r.stats.level, mark=MARK, better=MARK_BETTER,
        min_n=r.stats.min_n, paper=r.paper,
        direction=direction(r.metrics), every=every if r.datasets else None, any_control=any_control(r.checks),
        controls=controls_table(r.checks), deletion_sets=deletion_set_table(r.by_set) if r.by_set else None,
        set_names=deletion_set_names(r.by_set), set_charts=set_charts,
        comparisons=task_comparison_tables(r.comps, r.datasets, r.metrics),
        orderings=ordering_table(r.orderings) if r.orderings else None)


def _table1_json(r: _Report) -> dict[str, Any]:
    cells = r.cells
    return {
        "caption": r.caption, "models": report_models(r.jobs, r.sources),
        "min_examples": r.least.default, "min_examples_of": dict(r.least.of), "sources": r.sources,
        "recall_budget": r.budgets, "deletion_sets": r.by_set, "controls": r.checks, "time": r.times, "cost": r.costs,
        "view": r.view, "stats": asdict(r.stats), "datasets": r.datasets, "methods": r.methods, "metrics": r.metrics,
        "cells": [{"dataset": d, "method": me, "n": max(cells[(d, me)]["runs_n"]),
                   "n_per_run": sorted(cells[(d, me)]["runs_n"]), "figures": cells[(d, me)]["stats"]}
                  for d in r.datasets for me in r.methods if (d, me) in cells],
        "comparisons": r.comps, "paper_ordering": r.orderings,
        "unfinished": [{"run": str(j.path), "examples": j.unfinished[0], "planned": j.unfinished[1]}
                       for j in r.jobs if j.unfinished]}


def table1_layout(datasets: list[str], methods: list[str], metrics: list[dict[str, Any]],
                  cells: dict[tuple[str, str], dict], min_examples: int | MinExamples = 0, n_of=None,
                  view: str = "", marked: Optional[dict] = None, min_n: int = MIN_STATS) -> Table:
    """The Table-1 layout of ``table1.md`` and the report's ``report.html`` (``results_table.table1_table``) over the
    metrics some method has a figure of; its title says which way they point. ``n_of``: a task's N (``task_n``);
    ``marked``: the controls' marks (``reporting.controls.marks``)."""
    rows = rows_from_cells(datasets, methods, metrics, cells, view)
    shown = shown_metrics(rows, metrics)
    table = table1_table(rows, shown, min_examples, n_of or (lambda d: task_n(cells, d, methods)), marked,
                         is_control, min_n)
    return replace(table, title=direction(shown))
