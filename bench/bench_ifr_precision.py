"""IFR accuracy and speed on SmolLM2-135M (CPU): float32 against the float64 engine, before and after a change.

    python bench/bench_ifr_precision.py [--lengths 1000 2000 4000] [--gen-tokens 300] [--before REV] [--repeats 2]
                                        [--rows 8] [--target generate|text] [--json out.json] [--arith-repeats N]

For each prompt length: a MoreHopQA prompt (the question's own paragraphs in the middle of distractor paragraphs, then
the question) in the Table-1 chat format, followed by a generation of about ``--gen-tokens`` tokens (``generate``:
SmolLM2's greedy answer, cached under .cache/bench_ifr_precision/; ``text``: a chain of thought that restates the gold
paragraphs, then the answer). The sink span is the last 20 tokens before EOS, the thinking span the rest.

Methods: ``ifr_span``, ``ifr_multi_hop`` (K=1), ``ifr_multi_hop_both`` (K=1), and per-token IFR on ``--rows`` generated
rows spread over the generation (capture + ``per_token_ifr`` on those rows; every row in float64 would take too long).
The accuracy reference is the current code on the model loaded in float64 (``model.dtype=float64``: capture and
arithmetic in float64). Errors are over the prompt columns of the written row(s):

- ``err/max``: max |a - b| / max |b|;
- ``med`` / ``p99``: median and 99th percentile of |a - b| / |b| over the elements with |b| > 1e-6 max |b| (FLOOR);
- ``top10``: the ten largest prompt weights are the same tokens (for per-token rows: in every row).

Times are the whole ``attribute`` call (capture included), the minimum over interleaved repeats, divided by the
minimum time of one plain forward pass of the same model (eager, as loaded for attribution, LM head included, no
attentions returned: all layers' attentions would take 19 GiB at 4k tokens in float32). ``--cpu-time --threads 1``
counts this process's CPU seconds on one thread instead of wall-clock seconds: on a machine shared with other jobs the
wall-clock minimum still varies by tens of percent, the CPU time by a few. With
``--before REV`` the same measurements are made with the package as it was at git revision REV (extracted once under
.cache/bench_ifr_precision/ and imported as ``ctxbench_before``), in the same process and interleaved, so that both see
the same machine load. ``--arith-repeats N`` times only the IFR arithmetic on a fixed capture (many cheap repeats: on a
shared machine the whole-method times above are noisy).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "bench_ifr_precision"
FLOOR = 1e-6


# --- input ----------------------------------------------------------------------------------------------------------

def morehopqa_prompt_text(tok, n_prompt: int, row: int = 0):
    """About ``n_prompt`` tokens of paragraphs (row ``row``'s own in the middle), then its question; and the row."""
    from ctxbench.datasets.morehopqa import morehopqa_sample

    rows = json.loads(morehopqa_sample().read_text())
    own = ["".join(s) for _, s in rows[row]["context"]]
    others = ["".join(s) for i, r in enumerate(rows) if i != row for _, s in r["context"]]
    n_own = sum(len(tok(p, add_special_tokens=False).input_ids) for p in own)
    paras, n = [], n_own
    for p in others:  # distractor paragraphs that fit, up to the length
        k = len(tok(" " + p, add_special_tokens=False).input_ids)
        if n + k <= n_prompt:
            paras.append(p)
            n += k
    mid = len(paras) // 2
    paras = paras[:mid] + own + paras[mid:]
    return " ".join(paras) + "\n" + rows[row]["question"], rows[row]


def text_target(row, n_gen: int) -> str:
    """A chain of thought restating the gold paragraphs (repeated up to about n_gen tokens' worth), then the answer."""
    facts = " ".join("".join(s).strip() for _, s in row["context"])
    words = ("Let me think step by step. " + facts).split()
    body = " ".join((words * (1 + (n_gen * 3 // 4) // max(1, len(words))))[: n_gen * 3 // 4])
    return f"{body}\nSo the answer is {row['answer']}."


def generated_target(model, tok, prompt: str, n_gen: int) -> str:
    """SmolLM2's greedy answer (``n_gen`` new tokens at most), cached on disk."""
    from ctxbench.prompts.formats import format_prompt_text

    key = hashlib.sha256(f"{prompt}|{n_gen}".encode()).hexdigest()[:16]
    f = CACHE / f"gen-{key}.txt"
    if f.exists():
        return f.read_text()
    text, _ = format_prompt_text(tok, prompt, "table1")
    ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n_gen, min_new_tokens=n_gen // 2, do_sample=False,
                             pad_token_id=tok.pad_token_id)
    gen = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    f.write_text(gen)
    return gen


def make_input(model, tok, n_prompt: int, n_gen: int, target: str = "generate"):
    from ctxbench.prompts.formats import build_model_input

    prompt, row = morehopqa_prompt_text(tok, n_prompt)
    tgt = generated_target(model, tok, prompt, n_gen) if target == "generate" else text_target(row, n_gen)
    mi = build_model_input(tok, prompt, tgt, "table1")
    G = mi.G
    sink = (max(0, G - 21), G - 2)
    think = (0, sink[0] - 1) if sink[0] > 0 else None
    return mi, sink, think


# --- the code before a change ---------------------------------------------------------------------------------------

def load_before(rev: str):
    """The package at git revision ``rev`` as ``ctxbench_before`` (its own imports rewritten), for a same-process
    comparison."""
    sha = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    dst = CACHE / f"before-{sha[:12]}"
    pkg = dst / "ctxbench_before"
    if not pkg.exists():
        tar = subprocess.run(["git", "archive", sha, "src/ctxbench"], cwd=ROOT, capture_output=True, check=True).stdout
        tmp = dst / "tmp"
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            tf.extractall(tmp)
        (tmp / "src" / "ctxbench").rename(pkg)
        for py in pkg.rglob("*.py"):
            py.write_text(re.sub(r"\bctxbench(?=[. ])", "ctxbench_before", py.read_text()))
    if str(dst) not in sys.path:
        sys.path.insert(0, str(dst))
    import ctxbench_before.attribution as mod

    return mod, sha[:12]


# --- measures -------------------------------------------------------------------------------------------------------

def rel_errors(a: np.ndarray, b: np.ndarray, floor: float = FLOOR):
    """(max |a-b| / max |b|, relative errors of the elements with |b| > floor * max |b|, top-10 equal)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    bmax = np.abs(b).max()
    keep = np.abs(b) > floor * bmax
    rel = np.abs(a - b)[keep] / np.abs(b)[keep]
    top = set(np.argsort(-a, kind="stable")[:10]) == set(np.argsort(-b, kind="stable")[:10])
    return float(np.abs(a - b).max() / bmax), rel, top


def summarise(pairs) -> dict:
    """pairs: [(a, b)] prompt vectors (one per row compared) -> err/max, med, p99, top10 over all of them."""
    maxes, rels, tops = [], [], []
    for a, b in pairs:
        m, r, t = rel_errors(a, b)
        maxes.append(m)
        rels.append(r)
        tops.append(t)
    rel = np.concatenate(rels)
    return {"err_max": max(maxes), "med": float(np.median(rel)), "p99": float(np.quantile(rel, 0.99)),
            "top10": all(tops), "n": int(rel.size)}


def clock() -> float:
    """Wall-clock seconds, or this process's CPU seconds with --cpu-time (steadier on a shared machine)."""
    return time.process_time() if CPU_TIME else time.perf_counter()


CPU_TIME = False


def run_method(mod, name, model, tok, mi, sink, think, rows):
    """Prompt-column vectors of one method (list of rows) and its seconds."""
    P = mi.P
    t0 = clock()
    if name == "per_token_rows":
        cap = mod.capture(model, mi.input_ids, mi.gen_start, forward_attn_impl="sdpa")
        M = mod.per_token_ifr(cap, torch.as_tensor(rows) + mi.gen_start)
        out = M[:, mi.prompt_positions].double().numpy()
        return list(out), clock() - t0
    cls = {"ifr_span": mod.SpanIFRAttributor, "ifr_multi_hop": mod.MultiHopIFRAttributor,
           "ifr_multi_hop_both": mod.MultiHopBothAttributor}[name]
    att = cls() if name == "ifr_span" else cls(hops=1)
    res = att.attribute(model, tok, mi, sink, think)
    dt = clock() - t0
    r = int(res.rows_written[0])
    return [res.matrix[r, :P].astype(np.float64)], dt


METHODS = ("ifr_span", "ifr_multi_hop", "ifr_multi_hop_both", "per_token_rows")


def bench_length(args, models, tok, impls, n_prompt):
    m32, m64 = models
    mi, sink, think = make_input(m32, tok, n_prompt, args.gen_tokens, args.target)
    G = mi.G
    rows = np.unique(np.linspace(0, G - 2, args.rows).round().astype(int)).tolist()
    print(f"\n== prompt {mi.P} tokens (T = {mi.input_ids.numel()}), generated {G}, sink {sink}, thinking {think}, "
          f"per-token rows {rows}", flush=True)
    cur = impls["after"]
    ref, t_ref = {}, {}
    for name in METHODS:
        ref[name], t_ref[name] = run_method(cur, name, m64, tok, mi, sink, think, rows)
    ids = mi.input_ids[None]

    def fwd(model):
        t0 = clock()
        with torch.no_grad():
            model(ids, use_cache=False)
        return clock() - t0

    t64_fwd = fwd(m64)
    fwd(m32)  # warm-up
    t_fwd, times, vecs = [], {(k, n): [] for k in impls for n in METHODS}, {}
    for _ in range(args.repeats):
        t_fwd.append(fwd(m32))
        for name in METHODS:
            for key, mod in impls.items():
                v, dt = run_method(mod, name, m32, tok, mi, sink, think, rows)
                times[key, name].append(dt)
                vecs[key, name] = v
    tf = min(t_fwd)
    out = {"P": mi.P, "T": int(mi.input_ids.numel()), "G": G, "forward_s": tf, "forward64_s": t64_fwd,
           "methods": {}}
    for name in METHODS:
        row = {"float64": {"s": t_ref[name], "per_forward64": t_ref[name] / t64_fwd}}
        for key in impls:
            s = summarise(zip(vecs[key, name], ref[name]))
            s.update(s=min(times[key, name]), per_forward=min(times[key, name]) / tf)
            row[key] = s
        out["methods"][name] = row
    return out


def print_table(results, keys):
    print(f"\nerror against float64 over the prompt columns; time = attribute() / one forward pass "
          f"({'CPU' if CPU_TIME else 'wall'} seconds)")
    print(f"{'tokens':>13} {'method':20} {'code':7} {'err/max':>8} {'median':>8} {'p99':>8} {'top10':>5} "
          f"{'time/fwd':>8}  (s)")
    for res in results:
        for name, row in res["methods"].items():
            for key in keys:
                s = row[key]
                print(f"{res['P']:>6}+{res['G']:<6} {name:20} {key:7} {s['err_max']:8.1e} {s['med']:8.1e} "
                      f"{s['p99']:8.1e} {str(s['top10']):>5} {s['per_forward']:8.2f}  ({s['s']:.1f})")
            f64 = row["float64"]
            print(f"{'':13} {name:20} {'float64':7} {'':35} {f64['per_forward64']:8.2f}  ({f64['s']:.1f}, "
                  f"per float64 forward)")
        print(f"{'':13} forward pass: {res['forward_s']:.2f} s (float64 {res['forward64_s']:.2f} s)")


def arith_length(args, model, tok, impls, n_prompt):
    """The arithmetic alone, on one capture per implementation (the capture pass is the same code before and after):
    span IFR over the sink, a weighted span IFR over the chain of thought (one hop), per-token IFR on the sampled rows;
    ``--arith-repeats`` interleaved repeats, minimum kept."""
    mi, sink, think = make_input(model, tok, n_prompt, args.gen_tokens, args.target)
    g0 = mi.gen_start
    s_rows = torch.arange(g0 + sink[0], g0 + sink[1] + 1)
    t_rows = torch.arange(g0 + think[0], g0 + think[1] + 1)
    rows = torch.as_tensor(np.unique(np.linspace(0, mi.G - 2, args.rows).round().astype(int))) + g0
    caps = {k: mod.capture(model, mi.input_ids, g0, forward_attn_impl="sdpa") for k, mod in impls.items()}
    w = impls["after"].span_ifr(caps["after"], s_rows)[t_rows]
    ops = {"span_ifr(sink)": lambda mod, cap: mod.span_ifr(cap, s_rows),
           "span_ifr(CoT, weighted)": lambda mod, cap: mod.span_ifr(cap, t_rows, w),
           f"per_token_ifr({rows.numel()} rows)": lambda mod, cap: mod.per_token_ifr(cap, rows)}
    ids = mi.input_ids[None]
    t_fwd, t = [], {}
    for _ in range(args.arith_repeats):
        t0 = clock()
        with torch.no_grad():
            model(ids, use_cache=False)
        t_fwd.append(clock() - t0)
        for op, fn in ops.items():
            for key, mod in impls.items():
                t0 = clock()
                fn(mod, caps[key])
                t.setdefault((op, key), []).append(clock() - t0)
    tf = min(t_fwd)
    print(f"\n== arithmetic only: prompt {mi.P} + generated {mi.G} tokens; forward pass {tf:.2f} s "
          f"({'CPU' if CPU_TIME else 'wall'}); "
          f"minimum of {args.arith_repeats} interleaved repeats")
    out = {"P": mi.P, "G": mi.G, "forward_s": tf, "ops": {}}
    for op in ops:
        line = {k: min(t[op, k]) for k in impls}
        out["ops"][op] = line
        cells = "  ".join(f"{k} {v:7.2f} s ({v / tf:.2f} fwd)" for k, v in line.items())
        ratio = f"  after/before {line['after'] / line['before']:.3f}" if "before" in line else ""
        print(f"{op:28s} {cells}{ratio}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="+", default=[1000, 2000, 4000], help="prompt tokens")
    ap.add_argument("--gen-tokens", type=int, default=300)
    ap.add_argument("--rows", type=int, default=8, help="generated rows for the per-token comparison")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--target", choices=("generate", "text"), default="generate")
    ap.add_argument("--before", default=None, help="git revision of the code to compare with")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--cpu-time", action="store_true",
                    help="time with this process's CPU seconds instead of wall-clock ones (use with --threads 1)")
    ap.add_argument("--arith-repeats", type=int, default=0,
                    help="only time the IFR arithmetic on a fixed capture, with this many repeats (no float64 model)")
    args = ap.parse_args()
    global CPU_TIME
    CPU_TIME = args.cpu_time
    if args.threads:
        torch.set_num_threads(args.threads)

    import ctxbench.attribution as current
    from ctxbench.models import ModelConfig, load_causal_lm

    impls = {}
    if args.before:
        impls["before"], sha = load_before(args.before)
        print(f"before = {sha}")
    impls["after"] = current
    m32 = load_causal_lm(ModelConfig(device="cpu", dtype="float32"), need_attentions=True, cache_dir=ROOT / ".cache")
    if args.arith_repeats:
        res = [arith_length(args, m32.model, m32.tokenizer, impls, n) for n in args.lengths]
        if args.json:
            Path(args.json).write_text(json.dumps({"args": vars(args), "arith": res}, indent=1))
        return
    m64 = load_causal_lm(ModelConfig(device="cpu", dtype="float64"), need_attentions=True, cache_dir=ROOT / ".cache")
    print(f"SmolLM2-135M on CPU, torch threads {torch.get_num_threads()}, floor {FLOOR:g} of the vector max")
    results = []
    for n in args.lengths:
        results.append(bench_length(args, (m32.model, m64.model), m32.tokenizer, impls, n))
        print_table(results[-1:], list(impls))
        if args.json:
            Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    print_table(results, list(impls))


if __name__ == "__main__":
    main()
