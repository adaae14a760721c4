"""``report.html``: one self-contained page (inline CSS, JS and base64 figures; nothing fetched) per run_exp job and per
report command, for reading a run by eye: the summary tables, the job's figures, and per example a heat map of the
prompt for every method side by side, gold evidence marked, each method's top tokens outlined, and the hops of
multi-hop methods one button each. See docs/report.md.

The run stage stores what the heat maps need in ``heatmap_data/<example>.json`` (``write_example_data``) for its first
``heatmaps`` examples; the pages are rendered from the job dir alone, so the report command can draw them for any job.
"""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from ctxbench.errors import DataError
from ctxbench.files import atomic_write_text, safe_filename
from ctxbench.jsonl import iter_jsonl
from ctxbench.metrics.scorer import VIEW_LABELS
from ctxbench.reporting.aggregate import table1_rows, task_n, unfinished_note
from ctxbench.reporting.tables import direction, metric_header
from ctxbench.results import JobFiles

DATA_DIR = "heatmap_data"
PAGE = "report.html"
TOP_K = 10  # tokens outlined per heat map
MAX_TOKENS = 400  # prompt (and generation) tokens shown per example; longer ones are cut to windows
WINDOW = 8  # tokens kept on each side of a gold or top token when cutting


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

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _text(s: str) -> str:
    """Escaped for HTML; control characters (invalid in HTML) shown as U+FFFD."""
    return html.escape(_CONTROL.sub("\ufffd", str(s)))


def shades(w: np.ndarray) -> np.ndarray:
    """Signed percentages of the largest |weight| (red > 0, blue < 0 on the page)."""
    w = np.nan_to_num(np.asarray(w, dtype=np.float64))
    top = np.abs(w).max() if w.size else 0.0
    return np.rint(100 * w / top).astype(int) if top > 0 else np.zeros(w.shape, dtype=int)


def top_tokens(w: np.ndarray, k: int = TOP_K) -> list[int]:
    """Indices of the k largest positive weights, largest first (ties: earlier token first)."""
    w = np.nan_to_num(np.asarray(w, dtype=np.float64))
    order = np.argsort(-w, kind="stable")[:k]
    return [int(i) for i in order if w[i] > 0]


def shown_positions(n: int, priority: Sequence[int], max_tokens: int = MAX_TOKENS, window: int = WINDOW) -> list[int]:
    """All n positions if they fit; else windows of +-window around the priority positions (gold, then top tokens by
    rank), narrowed until at most max_tokens remain, and at width 0 the first max_tokens priority positions."""
    if n <= max_tokens:
        return list(range(n))
    keep = list(dict.fromkeys(i for i in priority if 0 <= i < n))
    for w in range(window, -1, -1):
        shown = {j for i in keep for j in range(max(0, i - w), min(n, i + w + 1))}
        if len(shown) <= max_tokens:
            return sorted(shown)
    return sorted(keep[:max_tokens])


def _style(a: int) -> str:
    if a > 0:
        return f' style="background:rgba(220,38,38,{a / 100:.2f})"'
    if a < 0:
        return f' style="background:rgba(37,99,235,{-a / 100:.2f})"'
    return ""


def _strip(tokens: Sequence[str], shown: list[int], alphas: list[int], marks: dict[int, str]) -> str:
    """Token spans (``data-i`` = position) with elided runs as one gap marker."""
    parts, prev = [], -1
    for j, i in enumerate(shown):
        if i > prev + 1:
            parts.append(f'<span class="gap">⋯ {i - prev - 1} tokens ⋯</span>')
        cls = "tok" + marks.get(i, "")
        parts.append(f'<span class="{cls}" data-i="{i}"{_style(alphas[j])}>{_text(tokens[i])}</span>')
        prev = i
    if prev < len(tokens) - 1:
        parts.append(f'<span class="gap">⋯ {len(tokens) - 1 - prev} tokens ⋯</span>')
    return "".join(parts)


def _variants(m: dict[str, Any], P: int) -> dict[str, tuple[str, np.ndarray, Optional[np.ndarray]]]:
    """key -> (button label, prompt weights, generation weights or None) for the views and then the hops."""
    out = {v: (VIEW_LABELS.get(v, v), np.asarray(w, dtype=np.float64), None) for v, w in m["views"].items()}
    rho = m.get("rho") or []
    for k, h in enumerate(m.get("hops") or []):
        h = np.asarray(h, dtype=np.float64)
        label = f"hop {k}" + (f" (ρ={rho[k]:.2f})" if k < len(rho) and rho[k] is not None else "")
        out[f"hop{k}"] = (label, h[:P], h[P:])
    return out


def example_section(ex: dict[str, Any], ex_id: str, top_k: int = TOP_K,
                    max_tokens: int = MAX_TOKENS) -> tuple[str, dict[str, Any]]:
    """One example's heat maps (HTML) and the shades of every panel's variants (for the page's data block)."""
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
        marks = {i: (" gold" if i in gold_set else "") + (" top" if i in d["t"] else "") for i in shown}
        buttons = "".join(f'<button data-key="{_text(k)}" class="{"on" if k == first else ""}">{_text(lbl)}</button>'
                          for k, (lbl, _, _) in vs.items())
        toplist = ", ".join(f"«{_text(tokens[i])}»" for i in d["t"])
        gen_alphas = d.get("g") or [0] * len(gen_shown)
        panels.append(
            f'<div class="panel" id="{pid}" data-method="{_text(method)}"><h4>{_text(method)}</h4>'
            f'<div class="variants">{buttons}</div>'
            f'<div class="ctx">{_strip(tokens, shown, d["c"], marks)}</div>'
            f'<p class="toplabel">top tokens: <span class="toplist">{toplist}</span></p>'
            f'<div class="gen">{_strip(generated, gen_shown, gen_alphas, {i: " sink" for i in sink_set})}</div>'
            f'</div>')
    view_buttons = "".join(f'<button data-key="{_text(k)}">{_text(VIEW_LABELS.get(k, k))}</button>' for k in view_keys)
    cut = (f"showing {len(shown)} of {P} prompt tokens (windows around gold and top tokens)" if len(shown) < P
           else f"all {P} prompt tokens")
    gold_note = f"{len(gold_set)} gold evidence tokens" if gold is not None else "no gold evidence recorded"
    head = (f'<section class="example" id="{ex_id}"><h3>Example {_text(ex["example_id"])}</h3>'
            f'<p class="meta">{cut}; {G} generated tokens; {gold_note}.</p>'
            f'<div class="allviews">all methods: {view_buttons}</div>')
    return head + f'<div class="panels">{"".join(panels)}</div></section>', data


# --- tables and figures --------------------------------------------------------------------------------------------

def _stat(s: Optional[dict[str, Any]]) -> str:
    """mean [95% interval] when the summary carries a bootstrap interval, else mean ± std."""
    if not s or s.get("mean") is None:
        return "–"
    if s.get("ci_low") is not None and s.get("ci_high") is not None:
        return f'{s["mean"]:.3f} <span class="ci">[{s["ci_low"]:.3f}, {s["ci_high"]:.3f}]</span>'
    return f'{s["mean"]:.3f}' + (f' <span class="ci">± {s["std"]:.3f}</span>' if s.get("std") is not None else "")


def summary_tables(summary: dict[str, Any]) -> str:
    """One table per scorer of a job's ``summary.json``: rows = methods, columns = view x metric."""
    views, methods, out = summary.get("views", []), summary.get("methods", {}), []
    for name, desc in summary.get("scorers", {}).items():
        rows = [m for m in methods if name in methods[m]]
        if not rows:
            continue
        metrics = desc["metrics"]
        mixed = len({m["higher_is_better"] for m in metrics}) > 1
        head = "".join(f"<th>{_text(VIEW_LABELS.get(v, v))} {_text(metric_header(m, mixed))}</th>"
                       for v in views for m in metrics)
        body = "".join(
            f"<tr><th>{_text(me)}</th>"
            + "".join(f"<td>{_stat(methods[me][name].get(v, {}).get(m['key']))}</td>" for v in views for m in metrics)
            + f"<td>{methods[me]['examples']}</td><td>{methods[me]['avg_attribution_s']:.2f}</td>"
            f"<td>{methods[me].get('avg_total_s', methods[me]['avg_attribution_s']):.2f}</td></tr>"
            for me in rows)
        out.append(f"<h3>{_text(desc['title'])} ({_text(direction(metrics))})</h3><table><thead><tr><th>method</th>"
                   f"{head}<th>examples</th><th>attribution s/example</th><th>total s/example</th></tr></thead>"
                   f"<tbody>{body}</tbody></table>")
    return "".join(out)


def comparison_table(rows: list[dict[str, Any]]) -> str:
    """The paired comparisons of ``summary.json`` (reporting/stats.py ``paired_comparison`` rows): A - B with its
    interval, the signed-rank p-value, and which side is better (bold when significant)."""
    if not rows:
        return ""
    body = []
    for c in rows:
        diff = _stat({"mean": c.get("diff"), "ci_low": c.get("ci_low"), "ci_high": c.get("ci_high")})
        p = "–" if c.get("p_value") is None else f"{c['p_value']:.3g}"
        better = {"a": c["a"], "b": c["b"]}.get(c.get("better"), "tie")
        better = f"<b>{_text(better)}</b>" if c.get("significant") else _text(better)
        body.append(f"<tr><th>{_text(c['a'])} − {_text(c['b'])}</th><td>{_text(c.get('mode', ''))}</td>"
                    f"<td>{_text(VIEW_LABELS.get(c.get('view'), c.get('view', '')))}</td><td>{_text(c['label'])}</td>"
                    f"<td>{c['n']}</td><td>{diff}</td><td>{p}</td><td>{better}</td></tr>")
    # folded: methods x views x metrics make many rows
    return (f"<details><summary>Paired comparisons on the same examples ({len(rows)})</summary><table><thead><tr>"
            "<th>A − B</th><th>mode</th><th>view</th><th>metric</th><th>pairs</th><th>mean difference [interval]</th>"
            f"<th>signed-rank p</th><th>better</th></tr></thead><tbody>{''.join(body)}</tbody></table></details>")


def figures(job_dir: Path) -> str:
    """The job's PNG figures (the scorers' plots, e.g. deletion curves), inlined as base64."""
    return "".join(f'<figure><img alt="{_text(p.stem)}" src="data:image/png;base64,'
                   f'{base64.b64encode(p.read_bytes()).decode()}"><figcaption>{_text(p.name)}</figcaption></figure>'
                   for p in sorted(Path(job_dir).glob("*.png")))


def table1_html(datasets: list[str], methods: list[str], metrics: list[dict], cells: dict,
                min_examples: int = 0) -> str:
    """The report command's Table 1 (``aggregate.table1``), laid out as ``table1.md``: a row per task and method,
    a column per metric, each task's best mean in bold (``aggregate.table1_rows``)."""
    mixed = len({m["higher_is_better"] for m in metrics}) > 1
    head = "".join(f"<th>{_text(metric_header(m, mixed))}</th>" for m in metrics)
    rows = []
    for task, method, figures in table1_rows(datasets, methods, metrics, cells, lambda d: task_n(cells, d, methods),
                                             min_examples):
        first = ' class="task-start"' if task else ""
        rows.append(f"<tr{first}><th>{_text(task)}</th><th>{_text(method)}</th>" + "".join(
            f"<td class=\"best\"><b>{_text(t)}</b></td>" if best else f"<td>{_text(t)}</td>" for t, best in figures)
            + "</tr>")
    return (f"<h2>Table 1 layout ({_text(direction(metrics))}; bold: the best mean of the task)</h2><table><thead>"
            f"<tr><th>task (N)</th><th>method</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


# --- pages ---------------------------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:100em;padding:0 1em;color:#111}
table{border-collapse:collapse;margin:.5em 0 1.5em;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:right;white-space:nowrap}
thead th{background:#f3f4f6}tbody th{text-align:left}tr.task-start{border-top:2px solid #888}
td.best{background:#fef9c3}.ci{color:#555;font-size:.85em}
figure{display:inline-block;margin:0 1em 1em 0}figure img{max-width:40em}
.panels{display:grid;grid-template-columns:repeat(auto-fill,minmax(30em,1fr));gap:1em}
.panel{border:1px solid #ddd;border-radius:6px;padding:.5em}.panel h4{margin:.2em 0}
.ctx,.gen{white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:.8em;line-height:1.7;max-height:32em;
overflow:auto}.gen{border-top:1px dashed #bbb;margin-top:.4em;padding-top:.4em;max-height:10em}
.gold{text-decoration:underline 3px #2563eb;font-weight:bold}.top{outline:2px solid #111;outline-offset:-1px}
.sink{text-decoration:underline 3px #16a34a}.gap{color:#888;background:#f3f4f6;font-style:italic}
button{font-size:.8em;margin:.1em;border:1px solid #999;background:#fff;border-radius:4px;cursor:pointer}
button.on{background:#111;color:#fff}.toplabel{font-size:.8em;margin:.3em 0}.meta{color:#444}
details{margin:1em 0}summary{font-weight:bold;cursor:pointer}
"""

# Switches a panel between its views and hops; the shades and top tokens come precomputed in the data block.
JS = """
const DATA = JSON.parse(document.getElementById('ctxbench-data').textContent);
function shade(a) { return a > 0 ? `rgba(220,38,38,${a / 100})` : a < 0 ? `rgba(37,99,235,${-a / 100})` : ''; }
function show(panel, key) {
  const d = DATA[panel.id][key];
  const top = new Set(d.t);
  panel.querySelectorAll('.ctx .tok').forEach((s, j) => {
    s.style.background = shade(d.c[j]);
    s.classList.toggle('top', top.has(Number(s.dataset.i)));
  });
  panel.querySelectorAll('.gen .tok').forEach((s, j) => { s.style.background = d.g ? shade(d.g[j]) : ''; });
  panel.querySelectorAll('.variants button').forEach(b => b.classList.toggle('on', b.dataset.key === key));
  panel.querySelector('.toplist').textContent = d.t.map(
    i => '\\u00ab' + panel.querySelector(`.ctx .tok[data-i="${i}"]`).textContent + '\\u00bb').join(', ');
}
document.addEventListener('click', e => {
  const b = e.target.closest('button[data-key]');
  if (!b) return;
  const panel = b.closest('.panel');
  const panels = panel ? [panel] : b.closest('.example').querySelectorAll('.panel');
  panels.forEach(p => { if (DATA[p.id][b.dataset.key]) show(p, b.dataset.key); });
});
"""


def legend(top_k: int = TOP_K, max_tokens: int = MAX_TOKENS) -> str:
    return (f"<p class='meta'>Heat maps: each prompt token shaded by its weight (red positive, blue negative, scaled "
            f"to the largest |weight| of that method and view or hop); <span class='gold'>underlined blue</span>: gold "
            f"evidence tokens (needle spans); <span class='top'>outlined</span>: the method's {top_k} highest-weighted "
            f"tokens; below each map the generated text, <span class='sink'>underlined green</span>: the explained "
            f"answer span. Buttons switch a method between its views and, for multi-hop methods, its hops (hop 0 "
            f"first; a hop's shades cover prompt and generation). Prompts longer than {max_tokens} tokens are cut to "
            f"windows of up to ±{WINDOW} tokens around the gold tokens and every method's top tokens, narrowed until "
            f"at most {max_tokens} remain; '⋯ n tokens ⋯' marks what was left out.</p>")


def page(title: str, body: str, data: dict[str, Any]) -> str:
    # "<" escaped so no string in the data block can close the script element.
    blob = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><link rel='icon' href='data:,'>"
            f"<title>{_text(title)}</title><style>{CSS}</style></head><body><h1>{_text(title)}</h1>{body}"
            f"<script type='application/json' id='ctxbench-data'>{blob}</script><script>{JS}</script></body></html>")


def job_body(job_dir: Path, summary: dict[str, Any], examples: int, prefix: str) -> tuple[str, dict[str, Any]]:
    """A job's tables, figures and heat maps; ``prefix`` keeps element ids unique when a page holds several jobs."""
    parts, data = [summary_tables(summary), comparison_table(summary.get("comparisons") or [])], {}
    fig = figures(job_dir)
    if fig:
        parts.append(f"<h2>Figures</h2>{fig}")
    exs = read_examples(job_dir, examples)
    if exs:
        parts.append("<h2>Examples</h2>")
    for n, ex in enumerate(exs):
        section, d = example_section(ex, f"{prefix}ex{n}")
        parts.append(section)
        data.update(d)
    return "".join(parts), data


def write_run_html(job_dir: str | Path, title: str, examples: int) -> Path:
    """``<job_dir>/report.html`` from the job's summary.json, figures and heat-map data."""
    job_dir = Path(job_dir)
    summary = JobFiles(job_dir).read_summary()
    body, data = job_body(job_dir, summary, examples, "")
    return atomic_write_text(job_dir / PAGE, page(title, legend() + body, data))


def write_report_html(jobs: list, table: tuple, output_dir: str | Path, examples: int,
                      caption: Optional[str] = None, min_examples: int = 0) -> Path:
    """``<output_dir>/report.html``: ``caption`` (what the table explains), the Table-1 layout (``aggregate.table1``'s
    result), then one folding section per job (``JobRun``) with its tables, figures and first ``examples`` heat maps."""
    parts, data = [*([f"<p><b>{_text(caption)}</b></p>"] if caption else []), table1_html(*table, min_examples),
                   legend()], {}
    for n, job in enumerate(jobs):
        body, d = job_body(job.path, job.summary, examples, f"j{n}")
        note = f" (unfinished: {unfinished_note(job)})" if job.unfinished else ""
        parts.append(f"<details{' open' if n == 0 else ''}><summary>{_text(job.dataset)}: {_text(job.path)}"
                     f"{_text(note)}</summary>"
                     f"{body}</details>")
        data.update(d)
    return atomic_write_text(Path(output_dir) / PAGE, page(f"ctxbench report: {len(jobs)} runs", "".join(parts), data))
