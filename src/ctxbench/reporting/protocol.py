"""What a Table-1 report was made from, beside its figures (docs/report.md#protocol): per task, where the explained
targets came from (gold continuation, or a sampling stage's CoT cache with its funnel and the model's accuracy),
the recall budget k/|gold| and the recall ceiling of each recall definition, the faithfulness orderings under each
deletion set (the FlashTrace paper's mixed sets, and one common set for every method), and the time each stage
took."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from ctxbench.core.cache_record import config_path
from ctxbench.metrics.faithfulness import COMMON_METRICS, COMMON_SETS, common_key
from ctxbench.metrics.recovery import top_k_count
from ctxbench.reporting.controls import is_control, marks
from ctxbench.reporting.paper import ranked
from ctxbench.reporting.render import render_page
from ctxbench.reporting.results_table import MinExamples, Table, text_table
from ctxbench.metrics.summary import by_method, example_seconds
from ctxbench.sampling.cache import funnel


# --- where the targets came from ------------------------------------------------------------------------------------

def _settings(cache: Path) -> dict:
    path = config_path(cache)
    if not path.exists():
        return {}
    obj = json.loads(path.read_text())
    return obj.get("settings", obj)


def _generator_name(settings: dict[str, Any]) -> Optional[str]:
    """The ``name`` of the generator class the record's ``generator.settings()`` names (its class path when that
    class cannot be imported here)."""
    target = (settings.get("generator") or {}).get("_target_")
    if not target:
        return None
    try:
        from hydra.utils import get_class

        return get_class(target).name
    except Exception:
        return target


def _cache_entry(task: str, path: Path) -> dict[str, Any]:
    """A sampled cache's funnel (``sampling.cache.funnel``), the generator and model that wrote its targets and the
    model's accuracy (judged correct over generated)."""
    counts, settings = funnel(path), _settings(path)
    return {"funnel": counts, "generator": _generator_name(settings),
            "model": (settings.get("model") or {}).get("name"),
            "accuracy": counts["judged_correct"] / counts["generated"] if counts["generated"] else None}


def source_rows(jobs, samples: Sequence[str | Path] = ()) -> list[dict[str, Any]]:
    """Per task (first job of each): the data source of its runs and, for a sampled cache, its funnel, generator and
    accuracy; then every cache in the ``samples`` folders whose task no job explained (too few rows kept), with
    ``explained`` False."""
    by_task: dict[str, list[dict]] = {}
    for job in jobs:
        sources = by_task.setdefault(job.dataset, [])
        if job.source and job.source.get("path") not in [s.get("path") for s in sources]:
            sources.append(job.source)
    out = []
    for task, sources in by_task.items():
        entry: dict[str, Any] = {"dataset": task, "kind": None, "path": None, "funnel": None, "generator": None,
                                 "accuracy": None, "sources": len(sources), "explained": True}
        if sources:
            src = sources[0]
            entry.update(kind=src.get("kind"), path=src.get("path"))
            if src.get("kind") == "cache" and src.get("path") and Path(src["path"]).exists():
                entry.update(_cache_entry(task, Path(src["path"])))
        out.append(entry)
    for folder in samples:
        for path in sorted(Path(folder).glob("*.jsonl")):
            task = path.name[:-len(".jsonl")]
            if task in by_task or task.endswith(".log") or ".shard-" in task:
                continue
            out.append({"dataset": task, "kind": "cache", "path": str(path), "sources": 1, "explained": False,
                        **_cache_entry(task, path)})
    return out


SOURCE_COLUMNS = ("task", "source", "generator", "tried", "generated", "well-formed", "correct", "kept", "accuracy")


def source_table(rows: list[dict[str, Any]], min_examples: int | MinExamples) -> Table:
    """Per task (``source_rows``): the source of its targets, the sampling funnel and the model's accuracy; a task
    no run explained says why (too few rows kept, or not yet)."""
    least = MinExamples.of_value(min_examples)
    body = []
    for r in rows:
        f = r["funnel"]
        src = f"{r['kind']}: `{r['path']}`" + (f" (+{r['sources'] - 1} more)" if r["sources"] > 1 else "")
        counts = ([str(f[k]) for k in ("processed", "generated", "well_formed", "judged_correct", "kept")]
                  if f else ["–"] * 5)
        task = r["dataset"]
        if not r["explained"]:
            few = f and f["kept"] < max(least.default, 1)
            task += f" (not explained: {f['kept']} kept)" if few else " (not explained yet)"
        body.append([task, src, r["generator"] or "–", *counts, _fig(r["accuracy"])])
    return text_table(SOURCE_COLUMNS, body)


# --- recall budget --------------------------------------------------------------------------------------------------

def record_budget(r: dict, fraction: float = 0.1) -> Optional[dict]:
    """A record's ``recovery_budget``; for records written before it was kept, the all-token budget from P and the
    gold count (what their recall ranked)."""
    if r.get("recovery_budget"):
        return r["recovery_budget"]
    gold, P = r.get("gold_tokens"), r.get("P")
    if not gold or not P or r.get("recovery") is None:
        return None
    k = top_k_count(int(P), fraction)
    return {"ranked": P, "k": k, "gold": gold, "k_over_gold": k / gold, "ceiling": min(k, gold) / gold,
            "stop_tokens_skipped": False}


def budget_rows(records_by_task: dict[str, list[dict]]) -> list[dict[str, Any]]:
    """Per task and recall definition (stop tokens skipped or not): mean k, |gold|, k/|gold| and ceiling over the
    examples, from the records that scored recovery."""
    out = []
    for task, records in records_by_task.items():
        groups: dict[bool, dict[str, dict]] = {}
        for r in records:
            b = record_budget(r)
            if b is not None:
                groups.setdefault(bool(b["stop_tokens_skipped"]), {})[r["example_id"]] = b
        for skipped, per_example in sorted(groups.items()):
            bs = list(per_example.values())
            out.append({"dataset": task, "stop_tokens_skipped": skipped, "examples": len(bs),
                        **{k: float(np.mean([b[k] for b in bs])) for k in ("ranked", "k", "gold", "k_over_gold",
                                                                            "ceiling")}})
    return out


def budget_table(rows: list[dict[str, Any]]) -> Table:
    """``budget_rows`` as a table: per task and recall definition, the mean budget and ceiling."""
    return text_table(("task", "recall", "examples", "ranked", "k", "gold", "k / gold", "ceiling"), [
        [r["dataset"], "stop tokens skipped (FlashTrace)" if r["stop_tokens_skipped"] else "all prompt tokens",
         str(r["examples"]), f"{r['ranked']:.1f}", f"{r['k']:.1f}", f"{r['gold']:.1f}", f"{r['k_over_gold']:.2f}",
         f"{r['ceiling']:.3f}"] for r in rows])


# --- faithfulness orderings per deletion set ------------------------------------------------------------------------

def _compared(comps: list[dict], dataset: str, label: str, x: str, y: str) -> str:
    c = next((c for c in comps if c["dataset"] == dataset and c["label"] == label and {c["a"], c["b"]} == {x, y}),
             None)
    if c is None:
        return "not compared"
    return "significant" if c["significant"] else "not significant"


def deletion_set_rows(datasets: list[str], methods: list[str], cells: dict, comps: list[dict],
                      paper: dict) -> list[dict[str, Any]]:
    """Per task and metric (RISE, MAS): the methods' order under the mixed deletion sets (each method its own: the
    paper's protocol), under each common set scored, and in the paper; and the pairs whose order depends on the set
    (mixed against each common set), with this report's paired comparison under the common set."""
    rows = []
    for d in datasets:
        for metric in COMMON_METRICS:
            orders: dict[str, dict[str, float]] = {}
            for name, label in [("mixed", metric)] + [(c, common_key(metric, c)) for c in COMMON_SETS]:
                vals = {me: cells[(d, me)][label] for me in methods if cells.get((d, me), {}).get(label) is not None}
                if len(vals) >= 2 and (name == "mixed" or label in {k for me in methods
                                                                     for k in cells.get((d, me), {})}):
                    orders[name] = vals
            if len(orders) < 2:
                continue  # no common set scored on this task
            there = {me: paper[(d, me)][metric] for me in orders["mixed"] if metric in paper.get((d, me), {})}
            flips = []
            for c in (c for c in COMMON_SETS if c in orders):
                for x, y in combinations(sorted(set(orders["mixed"]) & set(orders[c])), 2):
                    a, b = orders["mixed"], orders[c]
                    if a[x] != a[y] and b[x] != b[y] and (a[x] < a[y]) != (b[x] < b[y]):
                        better = x if b[x] < b[y] else y
                        flips.append({"set": c, "better": better, "worse": y if better == x else x,
                                      "comparison": _compared(comps, d, common_key(metric, c), x, y)})
            rows.append({"dataset": d, "metric": metric,
                         "orders": {k: ranked(v, higher_is_better=False) for k, v in orders.items()},
                         "paper": ranked(there, higher_is_better=False) if len(there) >= 2 else None,
                         "flips": flips})
    return rows


def deletion_set_names(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The common deletion sets some row was scored under: ``(name, what it deletes)``."""
    return [(c, COMMON_SETS[c]) for c in COMMON_SETS if any(c in r["orders"] for r in rows)]


def deletion_set_table(rows: list[dict[str, Any]]) -> Table:
    """``deletion_set_rows`` as a table: per task and metric the order under each set and the pairs that flip."""
    sets = [c for c, _ in deletion_set_names(rows)]
    body = []
    for r in rows:
        flips = "; ".join(f"`{f['set']}`: {f['better']} before {f['worse']} ({f['comparison']})" for f in r["flips"])
        body.append([r["dataset"], r["metric"], r["orders"]["mixed"], *[r["orders"].get(c, "–") for c in sets],
                     r["paper"] or "–", flips or "none"])
    return text_table(("task", "metric", "mixed (paper's protocol)", *[f"common `{c}`" for c in sets], "paper",
                       "order depends on the set"), body)


# --- the variants side by side --------------------------------------------------------------------------------------

PAPER_METRICS = ("RISE", "MAS", "Recall@10%")  # the paper's Table 1
VARIANT_METRICS = (*PAPER_METRICS, "LDS")  # and the set-free metric of the controls check (mode=lds)


def _short(caption: Optional[str], fallback: str) -> str:
    return (caption or fallback).split(":")[0].strip()


def variants_markdown(reports: list[tuple[str, dict]], paper: dict) -> str:
    """Several Table-1 reports (``(folder, table1.json)``, one per variant of the targets) beside the paper's Table 1
    (``variants.md.j2``): per task, each method's RISE / MAS / Recall@10% in the paper and with LDS in each variant
    (mean, and N when it differs from the variant's task N), then per variant the model's accuracy, the recall budget
    and ceiling of each definition, and how many of the paper's pairwise orders the variant keeps."""
    names = [_short(t.get("caption"), Path(d).parent.name) for d, t in reports]
    tasks = []
    for task in dict.fromkeys(d for _, t in reports for d in t["datasets"]):
        per = [(t, {c["method"]: c for c in t["cells"] if c["dataset"] == task}) for _, t in reports]
        methods = list(dict.fromkeys([m for (d, m) in paper if d == task] + [m for _, c in per for m in c]))
        rows = []
        for me in methods:
            row = [f"{me} (control)" if is_control(me) else me,
                   " / ".join(_fig(paper.get((task, me), {}).get(k)) for k in PAPER_METRICS)]
            for t, cells in per:
                c = cells.get(me)
                least = MinExamples(t.get("min_examples") or 0, t.get("min_examples_of") or {})
                marked = marks(t.get("controls") or [])  # a control as good as the variant's best method there
                row.append("–" if c is None else " / ".join(_cell_fig(c, k, least) + marked.get((task, me, k), "")
                                                             for k in VARIANT_METRICS))
            rows.append(row)
        tasks.append({"name": task, "methods": text_table(("method", "paper", *names), rows),
                      "variants": text_table(("variant", "N", "accuracy", "recall budget k/gold, ceiling",
                                              "paper's orders kept"),
                                             [_variant_row(name, t, cells, task)
                                              for name, (t, cells) in zip(names, per)])})
    return render_page("variants.md.j2", sources=[(n, d) for n, (d, _) in zip(names, reports)], tasks=tasks)


def _variant_row(name: str, t: dict, cells: dict, task: str) -> list[str]:
    """One variant's line under a task: its N, the model's accuracy, the recall budgets, the paper's orders kept."""
    src = next((s for s in t.get("sources") or [] if s["dataset"] == task), {})
    acc = _fig(src.get("accuracy"))
    f = src.get("funnel")
    if f:
        acc += f" ({f['kept']} kept of {f['processed']} tried)"
    budget = "; ".join(f"{'non-stop' if b['stop_tokens_skipped'] else 'all'}: {b['k_over_gold']:.2f}, "
                       f"{b['ceiling']:.3f}" for b in t.get("recall_budget") or [] if b["dataset"] == task)
    ns = [c["n"] for c in cells.values()]
    common = max(set(ns), key=lambda n: (ns.count(n), n)) if ns else None
    return [name, "–" if common is None else str(common), acc, budget or "–", _kept_orders(t, task)]


def _fig(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.3f}"


def _cell_fig(cell: dict, label: str, least: MinExamples) -> str:
    """A figure of a report's cell: "too few (n)" under its method's minimum, its n when it differs from the cell's
    or is under the report's minimum."""
    st = cell["figures"].get(label)
    if st is None or st.get("mean") is None:
        return "–"
    n = st.get("n", 0)
    if least.too_few(cell["method"], n):
        return f"too few ({n})"
    return _fig(st["mean"]) + ("" if n == cell["n"] and n >= least.default else f" (n={n})")


def _kept_orders(t: dict, task: str) -> str:
    """Over the task's metrics with two or more methods in both tables: the pairs in the paper's order here, of all
    pairs, and how many of those in the other order are significant here."""
    rows = [r for r in t.get("paper_ordering") or [] if r["dataset"] == task]
    if not rows:
        return "–"
    parts = []
    for r in rows:
        n = len(r["here"].replace(" = ", ", ").split(", "))
        pairs = n * (n - 1) // 2
        swapped = len(r["swapped"])
        sig = sum(1 for s in r["swapped"] if s["significant"])
        parts.append(f"{r['metric']} {pairs - swapped}/{pairs}" + (f" ({sig} swaps significant)" if swapped else ""))
    return "; ".join(parts)


# --- model families side by side -------------------------------------------------------------------------------------

FAMILY_METRICS = ("RISE@all", "MAS@all", "RISE@nonstop", "MAS@nonstop", "Recall@10%", "LDS", "Drop@1 (nats/token)",
                  "RISE", "MAS")  # the common sets first: the paper's mixed protocol last


def _family_name(folder: str, t: dict) -> str:
    return ", ".join(t.get("models") or []) or Path(folder).parent.name


def _verdicts(t: dict, task: str, label: str) -> dict[tuple[str, str], tuple[str, bool, int]]:
    """(a, b) -> (the better method, significant, pairs compared) of the report's paired comparisons of one task and
    metric; the pair in alphabetical order (reports may list the methods in other orders)."""
    out = {}
    for c in t.get("comparisons") or []:
        # a pair on fewer than the report's stats.min_n examples was not tested: no verdict rests on it
        if c["dataset"] == task and c["label"] == label and c.get("better") in ("a", "b") and not c.get("too_few"):
            out[tuple(sorted((c["a"], c["b"])))] = (c[c["better"]], bool(c.get("significant")), int(c["n"]))
    return out


def _task_names(t: dict) -> list[str]:
    """The tasks a report covers: those it scored, then those whose source it lists without explaining any example
    (a sampling stage that kept nothing)."""
    return list(dict.fromkeys([*t["datasets"], *(s["dataset"] for s in t.get("sources") or [])]))


def _why_not_scored(t: dict, task: str) -> str:
    counts = next((s.get("funnel") for s in t.get("sources") or [] if s["dataset"] == task and s.get("funnel")), None)
    if counts is None:
        return "has no run of this task"
    return f"explained no example of this task (its sampling stage kept {counts['kept']} of the " \
           f"{counts['processed']} rows it tried)"


def families_markdown(reports: list[tuple[str, dict]]) -> tuple[str, str]:
    """Two or more Table-1 reports of one variant made with different models (``(folder, table1.json)``):
    ``(families.md, pairs.md)`` (``families.md.j2``, ``families_pairs.md.j2``). The first: per task and metric, how
    many method pairs every model puts in the same order (and of them significant in every model), the fewest
    examples behind a verdict, and the tasks not compared with the reason (a task some model scored no example of:
    its sampling funnel, so a variant one model cannot answer reads as such, not as an empty page). The second: every
    pair of methods both reports compared (their paired comparisons, on the examples both methods scored), which
    method is better in each and whether the difference is significant there, and whether the order holds in every
    model."""
    names = [_family_name(d, t) for d, t in reports]
    sources = [(n, d, t.get("caption") or "no caption") for n, (d, t) in zip(names, reports)]
    summary, tasks = [], []
    for task in dict.fromkeys(task for _, t in reports for task in _task_names(t)):
        absent = [f"{n} {_why_not_scored(t, task)}" for n, (_, t) in zip(names, reports) if task not in t["datasets"]]
        if absent:
            summary.append([task, "–", "not compared", "–", "–"])
            tasks.append({"name": task, "absent": absent, "pairs": None})
            continue
        rows = []
        for label in FAMILY_METRICS:
            per = [_verdicts(t, task, label) for _, t in reports]
            pairs = [p for p in per[0] if all(p in v for v in per[1:])]
            if not pairs:
                continue
            held = sig_both = 0
            for a, b in pairs:
                got = [v[(a, b)] for v in per]
                same = len({w for w, _, _ in got}) == 1
                held += same
                sig_both += same and all(s for _, s, _ in got)
                verdict = "holds" if same else "reversed"
                if not same and any(s for _, s, _ in got):
                    verdict += " (significant in " + ", ".join(m for m, (_, s, _) in zip(names, got) if s) + ")"
                rows.append([label, f"{a} vs {b}", *[f"{w}{'*' if s else ''} (n={n})" for w, s, n in got], verdict])
            # the fewest examples behind a verdict: one on one or two examples reads "holds" like one on twenty
            fewest = min(v[p][2] for v in per for p in pairs)  # (better, significant, n)
            summary.append([task, label, f"{held} of {len(pairs)}", str(sig_both), str(fewest)])
        tasks.append({"name": task, "absent": [], "pairs": text_table(("metric", "pair", *names, "across models"),
                                                                        rows) if rows else None})
    table = text_table(("task", "metric", "pairs in the same order in every model",
                        "of them significant in every model", "fewest examples behind a verdict"), summary)
    return (render_page("families.md.j2", sources=sources, summary=table, tasks=tasks),
            render_page("families_pairs.md.j2", sources=sources, tasks=tasks))


# --- time per stage -------------------------------------------------------------------------------------------------

def time_rows(jobs) -> list[dict[str, Any]]:
    """Per run and method: the examples it scored and the mean seconds per example, of the attribution alone and
    with its scoring (``metrics.summary.example_seconds``), and the median of the latter (a lane slowed down for a
    while by
    other work on its cores moves the mean, not the median); the run is named by its folder's parent (a Table-1
    lane: ``faith_rec``, ``ig``, ``rec_h1``, ...)."""
    out = []
    for job in jobs:
        for method, recs in by_method(job.records()).items():
            total = [example_seconds(r) for r in recs]
            out.append({"dataset": job.dataset, "run": job.path.parent.name, "method": method, "examples": len(recs),
                        "attribution_s": float(np.mean([float(r["attribution_s"]) for r in recs])),
                        "total_s": float(np.mean(total)), "total_median_s": float(np.median(total))})
    return out


def _spread(values) -> tuple[float, float, float]:
    """Median, min and max."""
    return float(np.median(values)), float(np.min(values)), float(np.max(values))


def cost_rows(jobs) -> list[dict[str, Any]]:
    """Per task, run and method with a cost ledger (``attribution.cost``: result lines written since it exists):
    the passes of the method and of its scoring, per example, as median and range, and the median peak memory
    added."""
    out = []
    for job in jobs:
        for method, recs in by_method(job.records()).items():
            led = [r for r in recs if r.get("cost")]
            if not led:
                continue
            scoring = [sum(c.get("forward_sequences", 0) for c in (r.get("scoring_cost") or {}).values())
                       for r in led]
            peaks = [r["cost"]["peak_mib"] for r in led if r["cost"].get("peak_mib") is not None]
            out.append({"dataset": job.dataset, "run": job.path.parent.name, "method": method, "examples": len(led),
                        "forward": _spread([r["cost"]["forward_sequences"] for r in led]),
                        "backward": _spread([r["cost"]["backward"] for r in led]),
                        "scoring_forward": _spread(scoring),
                        "peak_mib": float(np.median(peaks)) if peaks else None,
                        "peak_kind": led[0]["cost"].get("peak_kind")})
    return out


def cost_table(rows: list[dict[str, Any]]) -> Optional[Table]:
    """``cost_rows`` as a table (None when no line has a ledger)."""
    if not rows:
        return None

    def fig(t):
        med, lo, hi = t
        return f"{med:.0f} [{lo:.0f}, {hi:.0f}]"

    return text_table(("task", "run", "method", "examples", "forward sequences", "backward passes",
                       "scoring forward sequences", "peak MiB added"),
                      [[r["dataset"], r["run"], r["method"], str(r["examples"]), fig(r["forward"]),
                        fig(r["backward"]), fig(r["scoring_forward"]),
                        "–" if r["peak_mib"] is None else f"{r['peak_mib']:.0f} ({r['peak_kind']})"] for r in rows])


def sampling_time_table(sources: list[dict[str, Any]]) -> Optional[Table]:
    """Per sampled task: the sampling stage's wall time over the rows it tried, per row and per kept example (None
    when no cache recorded its time)."""
    sampled = [r for r in sources if r.get("funnel") and r["funnel"].get("seconds") is not None]
    if not sampled:
        return None
    body = []
    for r in sampled:
        f = r["funnel"]
        body.append([r["dataset"], f"{f['processed']} ({f['timed_rows']})", f"{f['seconds']:.0f}",
                     f"{f['seconds'] / f['timed_rows']:.1f}", f"{f['seconds'] / f['kept']:.1f}" if f["kept"] else "–"])
    return text_table(("task", "rows tried (timed)", "wall s", "s per row", "s per kept example"), body)


def attribution_time_table(rows: list[dict[str, Any]]) -> Table:
    """``time_rows`` as a table: per task, run and method the mean (and median) seconds per example."""
    return text_table(("task", "run", "method", "examples", "attribution s", "with scoring s",
                       "with scoring s, median"),
                      [[r["dataset"], r["run"], r["method"], str(r["examples"]), f"{r['attribution_s']:.1f}",
                        f"{r['total_s']:.1f}", f"{r['total_median_s']:.1f}"] for r in rows])
