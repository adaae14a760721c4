"""``report.html``: one self-contained page (inline CSS, JS and base64 figures; nothing fetched) per run_exp job and per
report command, for reading a run by eye: the summary tables, the job's figures, and per example a heat map of the
prompt for every method side by side, gold evidence marked, each method's top tokens outlined, and the hops of
multi-hop methods one button each. See docs/report.md.

The run stage stores what the heat maps need in ``heatmap_data/<example>.json`` (``write_example_data``) for its first
``heatmaps`` examples; the pages are rendered from the job dir alone, so the report command can draw them for any job.
The page is ``resources/templates/report.html.j2`` (Jinja2, autoescaped): its tables are ``results_table``'s (the same
as ``summary.md`` and ``table1.md``), its heat maps ``reporting.heatmap``'s strips; this module hands it data only.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from ctxbench.core.errors import DataError
from ctxbench.utils.files import atomic_write_text, safe_filename
from ctxbench.core.jsonl import iter_jsonl
from ctxbench.reporting import heatmap
from ctxbench.reporting.aggregate import FIGURES, table1_layout
from ctxbench.reporting.controls import marks
from ctxbench.reporting.heatmap import MAX_TOKENS, TOP_K, WINDOW, shades, shown_positions, top_tokens
from ctxbench.reporting.render import render_page
from ctxbench.reporting.results_table import (MIN_STATS, MinExamples, Table, comparison_tables, rows_from_summary,
                                              summary_tables, view_label)
from ctxbench.jobs.results import JobFiles, unfinished_note

DATA_DIR = "heatmap_data"
PAGE = "report.html"


# --- data written by the run stage -----------------------------------------------------------------------------------

def _rounded(x) -> list[float]:
    # 4 significant digits: the page shows shades, and the files stay small.
    return [float(f"{v:.4g}") for v in np.nan_to_num(np.asarray(x, dtype=np.float64)).ravel()]


def method_heatmap(result, weights: dict[str, np.ndarray]) -> dict[str, Any]:
    """What the page draws of one attribution: the prompt weights of each view and, for multi-hop methods, every hop
    vector over the P + G columns with its ratio rho."""
    hops = None if result.hop_vectors is None else [_rounded(h) for h in result.hop_vectors]
    return {"views": {v: _rounded(w) for v, w in weights.items()}, "hops": hops, "rho": result.rho}


def write_example_data(output_dir: str | Path, example_id: str, *, tokens: Sequence[str], generated: Sequence[str],
                       gold: Optional[Iterable[int]], sink_span, methods: dict[str, dict[str, Any]]) -> Path:
    """``heatmap_data/<example>.json``; methods already in the file (an earlier, resumed run) are kept."""
    path = Path(output_dir) / DATA_DIR / f"{safe_filename(example_id)}.json"
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"methods": {}}
    data.update(example_id=example_id, tokens=list(tokens), generated=list(generated),
                gold=None if gold is None else [int(i) for i in gold],
                sink_span=None if sink_span is None else [int(i) for i in sink_span])
    data["methods"].update(methods)
    atomic_write_text(path, json.dumps(data) + "\n")
    return path


def read_examples(job_dir: str | Path, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` examples with heat-map data, in the order of ``results.jsonl``."""
    d = Path(job_dir) / DATA_DIR
    if limit <= 0 or not d.is_dir():
        return []
    results = JobFiles(Path(job_dir)).results
    order = list(dict.fromkeys(r["example_id"] for _, r in iter_jsonl(results))) if results.exists() else []
    rank = {safe_filename(e): i for i, e in enumerate(order)}
    files = sorted(d.glob("*.json"), key=lambda p: (rank.get(p.stem, len(rank)), p.stem))
    out = []
    for p in files[:limit]:
        try:
            ex = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DataError(f"not JSON ({exc.msg})", file=p, line=exc.lineno) from None
        for key in ("tokens", "generated", "methods"):
            if key not in ex:
                raise DataError("missing", file=p, field=key)
        P, G = len(ex["tokens"]), len(ex["generated"])
        for method, m in ex["methods"].items():
            for view, w in m["views"].items():
                if len(w) != P:
                    raise DataError(f"{len(w)} weights for {P} prompt tokens", file=p, field=f"methods.{method}.{view}")
            for k, h in enumerate(m.get("hops") or []):
                if len(h) != P + G:
                    raise DataError(f"{len(h)} weights for {P} + {G} tokens", file=p,
                                    field=f"methods.{method}.hops[{k}]")
        out.append(ex)
    return out


# --- heat maps -----------------------------------------------------------------------------------------------------

def _variants(m: dict[str, Any], P: int) -> dict[str, tuple[str, np.ndarray, Optional[np.ndarray]]]:
    """key -> (button label, prompt weights, generation weights or None) for the views and then the hops."""
    out = {v: (view_label(v), np.asarray(w, dtype=np.float64), None) for v, w in m["views"].items()}
    rho = m.get("rho") or []
    for k, h in enumerate(m.get("hops") or []):
        h = np.asarray(h, dtype=np.float64)
        label = f"hop {k}" + (f" (ρ={rho[k]:.2f})" if k < len(rho) and rho[k] is not None else "")
        out[f"hop{k}"] = (label, h[:P], h[P:])
    return out


def example_section(ex: dict[str, Any], ex_id: str, top_k: int = TOP_K,
                    max_tokens: int = MAX_TOKENS) -> tuple[dict[str, Any], dict[str, Any]]:
    """One example's heat maps, as the page's ``example`` macro draws them, and the shades of every panel's variants
    (for the page's data block)."""
    tokens, generated = ex["tokens"], ex["generated"]
    P, G = len(tokens), len(generated)
    gold = ex.get("gold")
    sink = ex.get("sink_span")
    variants = {method: _variants(m, P) for method, m in ex["methods"].items()}
    tops = {(me, k): top_tokens(v[1], top_k) for me, vs in variants.items() for k, v in vs.items()}
    ranked = [t[r] for r in range(top_k) for t in tops.values() if r < len(t)]
    shown = shown_positions(P, list(gold or ()) + ranked, max_tokens)
    visible = set(shown)
    sink_pos = list(range(sink[0], sink[1] + 1)) if sink else []
    gen_top = {key: top_tokens(v[2], top_k) for vs in variants.values() for key, v in vs.items() if v[2] is not None}
    gen_shown = shown_positions(G, sink_pos + [i for t in gen_top.values() for i in t], max_tokens)
    gold_set, sink_set = set(gold or ()), set(sink_pos)

    panels, data = [], {}
    view_keys = list(dict.fromkeys(k for vs in variants.values() for k, v in vs.items() if v[2] is None))
    for n, (method, vs) in enumerate(variants.items()):
        pid = f"{ex_id}-m{n}"
        data[pid] = {}
        for key, (_, w, g) in vs.items():
            # a hop is shaded on one scale over prompt and generation, so its split between the two shows
            s = shades(w if g is None else np.concatenate([w, g]))
            data[pid][key] = {"c": s[:P][shown].tolist(), "t": [i for i in tops[(method, key)] if i in visible]}
            if g is not None:
                data[pid][key]["g"] = s[P:][gen_shown].tolist()
        first = next(iter(vs))
        d = data[pid][first]
        top = set(d["t"])
        marks = {i: ["gold"] * (i in gold_set) + ["top"] * (i in top) for i in shown}
        panels.append({
            "id": pid, "method": method,
            "buttons": [{"key": k, "label": lbl, "on": k == first} for k, (lbl, _, _) in vs.items()],
            "ctx": heatmap.strip(tokens, shown, d["c"], marks),
            "top": [tokens[i] for i in d["t"]],
            "gen": heatmap.strip(generated, gen_shown, d.get("g") or [0] * len(gen_shown),
                                 {i: ["sink"] for i in sink_set})})
    section = {"id": ex_id, "example_id": ex["example_id"], "shown": len(shown), "P": P, "G": G,
               "gold": None if gold is None else len(gold_set),
               "view_buttons": [{"key": k, "label": view_label(k)} for k in view_keys], "panels": panels}
    return section, data


# --- pages ---------------------------------------------------------------------------------------------------------

def figures(job_dir: Path) -> list[dict[str, str]]:
    """The job's PNG figures (the scorers' plots, e.g. deletion curves), to be inlined as base64."""
    return [{"name": p.name, "stem": p.stem, "data": base64.b64encode(p.read_bytes()).decode()}
            for p in sorted(Path(job_dir).glob("*.png"))]


def job_body(job_dir: Path, summary: dict[str, Any], examples: int, prefix: str) -> tuple[dict[str, Any], dict]:
    """A job's tables (``results_table``, as in ``summary.md``), figures and heat maps, as the page's ``job_body``
    macro draws them; ``prefix`` keeps element ids unique when a page holds several jobs."""
    views, descriptions = summary.get("views", []), summary.get("scorers", {})
    comparisons = summary.get("comparisons") or []
    body = {"tables": summary_tables(rows_from_summary(summary), descriptions, views),
            "comparisons": comparison_tables(comparisons, descriptions, views), "n_comparisons": len(comparisons),
            "figures": figures(job_dir), "examples": [], "heading": None}
    data: dict[str, Any] = {}
    for n, ex in enumerate(read_examples(job_dir, examples)):
        section, d = example_section(ex, f"{prefix}ex{n}")
        body["examples"].append(section)
        data.update(d)
    return body, data


def page(title: str, jobs: list[dict[str, Any]], data: dict[str, Any], caption: Optional[str] = None,
         table1: Optional[Table] = None, charts: Sequence[dict[str, str]] = ()) -> str:
    """``report.html`` from ``resources/templates/report.html.j2`` (``charts``: the report's figures, ``figures``)."""
    return render_page("report.html.j2", title=title, caption=caption, table1=table1, jobs=jobs, data=data,
                       charts=list(charts),
                       colours=heatmap.colours(), top_k=TOP_K, max_tokens=MAX_TOKENS, window=WINDOW)


def write_run_html(job_dir: str | Path, title: str, examples: int) -> Path:
    """``<job_dir>/report.html`` from the job's summary.json, figures and heat-map data."""
    job_dir = Path(job_dir)
    summary = JobFiles(job_dir).read_summary()
    body, data = job_body(job_dir, summary, examples, "")
    return atomic_write_text(job_dir / PAGE, page(title, [body], data))


def write_report_html(jobs: list, table: tuple, output_dir: str | Path, examples: int,
                      caption: Optional[str] = None, min_examples: int | MinExamples = 0,
                      min_n: int = MIN_STATS) -> Path:
    """``<output_dir>/report.html``: ``caption`` (what the table explains), the Table-1 layout (``aggregate.table1``'s
    result; no row on fewer than ``min_n`` examples, as in table1.md), then one folding section per job (``JobRun``)
    with its tables, figures and first ``examples`` heat maps."""
    sections, data = [], {}
    for n, job in enumerate(jobs):
        body, d = job_body(job.path, job.summary, examples, f"j{n}")
        note = f" (unfinished: {unfinished_note(job)})" if job.unfinished else ""
        sections.append({**body, "heading": f"{job.dataset}: {job.path}{note}"})
        data.update(d)
    # the controls' marks as table1.md has them (write_table1 puts its control checks in table1.json first)
    saved = Path(output_dir) / "table1.json"
    checks = (json.loads(saved.read_text(encoding="utf-8")).get("controls") or []) if saved.exists() else []
    layout = table1_layout(*table, min_examples, marked=marks(checks), min_n=min_n)
    charts = figures(Path(output_dir) / FIGURES)  # one per task, written beside table1.md
    return atomic_write_text(Path(output_dir) / PAGE, page(f"ctxbench report: {len(jobs)} runs", sections, data,
                                                           caption, layout, charts))
