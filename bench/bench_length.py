"""Length scaling of every attribution method on SmolLM2-135M, or any ``conf/model`` option (``--model gemma3-270m``),
on the CPU: time over one forward pass, peak memory added.

    OMP_NUM_THREADS=2 python bench/bench_length.py [--lengths 1024 2048 4096 8192] [--methods ifr_multi_hop attention]
        [--model smollm2-135m] [--generated 0]
        [--threads 2] [--repeats 3] [--method-repeats 1] [--paired] [--timeout-per-method 300] [--max-added-gib 6]
        [--profile ifr_multi_hop]

Input (``make_input``): a RULER-style needle in a haystack of exactly L tokens, L - L/4 of prompt and L/4 generated
(``--generated N``: N generated, an answer's length at any context length). The haystack is the offline Wikipedia
summaries that the RULER generator uses (``wiki_sentences``), one "special magic number" sentence at half depth and
the question last; the generated part is teacher-forced: more haystack prose as a stand-in chain of thought, then
"Answer: \\box{<number>}" and EOS. The sink span is the answer, the thinking span the rest (only lengths matter for
the cost; the text is real so sentence-based methods see real sentences).

Each method is built from its own ``conf/attribution/<name>.yaml`` (Hydra compose + ``ctxbench.core.part.build``) and
every (method, length) runs in a fresh child process: the model is loaded (fp32, eager attention, as the run stage
loads it), warmed with a short pass, the kernel's peak-RSS mark is reset (``/proc/self/clear_refs`` = 5), and the
method runs once. Peak memory added = VmHWM after the call - VmRSS before it: the exact resident high-water mark of the
call, all allocators included (torch's CPU allocator returns large blocks to the OS, so this is what the method needs).
Beside it, the estimate the run stage checks up front (``Attributor.memory_need``, ctxbench.attribution.memory) and
measured / estimate.
Time: wall (perf_counter) and CPU (process_time, all threads) of the ``attribute`` call. The unit per length is one
plain forward pass (no gradient, no cache, all logits), the median of ``--repeats``, measured the same way, both with
the eager attention the model is loaded with and with sdpa (the faster kernel, the stricter unit).

Budget: a method is skipped at larger lengths once it ran past ``--timeout-per-method`` (the child stops it there);
from the third length on also when the growth measured so far (power law over the measured lengths) predicts it would
(time), or that it would add more than ``--max-added-gib`` (which keeps a shared machine from swapping). Every skip is
printed with its reason. At the end: multi-hop IFR's ratios against the 1.3x goal and a linear fit of its memory
against length, and for every method the length where model + added memory would pass 24 GiB (measured when it did,
otherwise extrapolated from the measured growth and labelled so).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from ctxbench.attribution.memory import ModelShape

ROOT = Path(__file__).resolve().parents[1]
GIB = 2 ** 30
FIT_IN = 24 * GIB  # the memory budget the issue asks about
UNITS = ("forward_eager", "forward_sdpa")


# --- parts and input -----------------------------------------------------------------------------------------------

def all_methods() -> list[str]:
    return sorted(p.stem for p in (ROOT / "conf" / "attribution").glob("*.yaml"))


def build_method(name: str, overrides: tuple[str, ...] = ()):
    """The attributor of ``conf/attribution/<name>.yaml``, composed against its schema like a run does (``overrides``
    in Hydra syntax, e.g. ``attribution.ifr_multi_hop.hops=3``)."""
    from hydra import compose, initialize_config_dir

    from ctxbench.attribution import Attributor
    from ctxbench.stages.conf import CONF_DIR, register_configs
    from ctxbench.core.part import build

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name=f"attribution/{name}", overrides=["+seed=0", *overrides])
    return build(cfg.attribution[name], f"attribution.{name}", Attributor)


def load_model(name: str = "smollm2-135m"):
    """The ``conf/model/<name>.yaml`` model in fp32 on the CPU, eager attention (as the run stage loads it)."""
    from omegaconf import OmegaConf

    from ctxbench.models import ModelConfig, load_causal_lm

    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig),
                                              OmegaConf.load(ROOT / "conf" / "model" / f"{name}.yaml")))
    cfg.device, cfg.dtype = "cpu", "float32"
    lm = load_causal_lm(cfg, need_attentions=True, cache_dir=ROOT / ".cache")
    return lm.model, lm.tokenizer


def _sentence_tokens(tok, sentences, budget: int) -> list[int]:
    out: list[int] = []
    for s in sentences:
        if len(out) >= budget:
            break
        out += tok(" " + s, add_special_tokens=False).input_ids
    return out[:budget]


def make_input(tok, length: int, seed: int = 0, generated: int = 0):
    """(ModelInput, sink span, thinking span) of exactly ``length`` tokens, ``generated`` of them generated (0: a
    quarter)."""
    from ctxbench.datasets.ruler_gen.text_sources import wiki_sentences
    from ctxbench.prompts.formats import ModelInput

    rng = random.Random(seed)
    sents = wiki_sentences()
    start = rng.randrange(len(sents) // 2)  # haystack and "chain of thought" are disjoint stretches of prose
    key, value = "sapphire-lantern", str(rng.randrange(10 ** 6, 10 ** 7))
    needle = tok(f" One of the special magic numbers for {key} is: {value}.", add_special_tokens=False).input_ids
    question = tok(f"\nWhat is the special magic number for {key} mentioned in the provided text?",
                   add_special_tokens=False).input_ids
    answer = tok(f" Answer: \\box{{{value}}}", add_special_tokens=False).input_ids
    G = generated or length // 4
    P = length - G
    hay = _sentence_tokens(tok, sents[start:], P - len(needle) - len(question))
    prompt = hay[:len(hay) // 2] + needle + hay[len(hay) // 2:] + question
    cot = _sentence_tokens(tok, sents[start + len(sents) // 2:], G - len(answer) - 1)
    gen = cot + answer + [tok.eos_token_id]
    if len(prompt) != P or len(gen) != G:
        raise RuntimeError(f"haystack too short for {length} tokens")
    mi = ModelInput(input_ids=torch.tensor(prompt + gen), prompt_positions=torch.arange(P), prompt_offsets=[],
                    gen_start=P, text="")
    sink = (len(cot), len(cot) + len(answer) - 1)
    return mi, sink, (0, len(cot) - 1)


# --- one measurement (child process) -------------------------------------------------------------------------------

def _status_bytes(field: str) -> int:
    m = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(m.group(1)) * 1024


class Budget(Exception):
    pass


def measure(fn) -> dict:
    """Wall and CPU seconds of ``fn()`` and the resident memory it added at its peak (bytes); ``stopped`` when it
    raised ``Budget`` (the figures then cover the call until then)."""
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status_bytes("VmRSS")
    w0, c0 = time.perf_counter(), time.process_time()
    out, stopped = None, False
    try:
        out = fn()
    except Budget:
        stopped = True
    return {"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
            "added": max(0, _status_bytes("VmHWM") - before), "out": out, "stopped": stopped}


def _alarm(signum, frame):
    raise Budget()


def sdpa_forward(model, ids, keep: int = 0) -> None:
    from ctxbench.models.attention import attention_kernel

    with attention_kernel(model, "sdpa"), torch.no_grad():
        model(ids, use_cache=False, logits_to_keep=keep)


def run_child(args) -> None:
    model, tok = load_model(args.model)
    keep = 1 if args.unit_logits == "last" else 0  # transformers' logits_to_keep: 0 = every position
    mi, sink, think = make_input(tok, args.child_length, generated=args.generated)
    ids = mi.input_ids[None]
    with torch.no_grad():  # warm kernels and the allocator on a short pass: only the measured call's memory counts
        model(ids[:, :64], use_cache=False)
    if args.child in UNITS:
        from ctxbench.models.attention import attention_kernel

        def fwd():
            with torch.no_grad():
                model(ids, use_cache=False, logits_to_keep=keep)

        with attention_kernel(model, "sdpa" if args.child == "forward_sdpa" else None):
            runs = [measure(fwd) for _ in range(args.repeats)]
        rec = {k: statistics.median(r[k] for r in runs) for k in ("wall", "cpu")}
        rec["added"] = max(r["added"] for r in runs)
    else:
        method = build_method(args.child)
        # warm the method's own code paths (kernels, first calls) on a short input, as the forward unit is warm
        method.attribute(model, tok, *make_input(tok, 128))
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(args.timeout_per_method)
        fw: list = []
        try:
            if args.profile:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                r = measure(lambda: prof.runcall(method.attribute, model, tok, mi, sink, think))
                pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
                runs = [r]
            else:
                runs = []
                for _ in range(args.method_repeats):
                    if args.paired:  # the sdpa forward in the same process, interleaved: immune to slow drifts
                        fw.append(measure(lambda: sdpa_forward(model, ids, keep)))
                    runs.append(measure(lambda: method.attribute(model, tok, mi, sink, think)))
                r = runs[0]
        finally:
            signal.alarm(0)
        if r["stopped"]:  # the peak until the stop is a lower bound of the method's (its loop repeats one pattern)
            print(json.dumps({"timeout": args.timeout_per_method, "added_partial": r["added"]}))
            return
        rec = {k: statistics.median(x[k] for x in runs) for k in ("wall", "cpu")}
        rec["added"] = max(x["added"] for x in runs)
        need = method.memory_need(ModelShape.of(model), int(mi.input_ids.numel()), int(mi.G))
        rec["estimate"] = need.bytes if need is not None else None  # the run stage's up-front estimate
        rec["timings"] = {k: round(v, 3) for k, v in r["out"].timings.items()}
        if fw:
            rec["paired_sdpa"] = {k: statistics.median(x[k] for x in fw) for k in ("wall", "cpu")}
            rec["paired_ratio"] = {k: statistics.median(m[k] / f[k] for m, f in zip(runs, fw)) for k in ("wall", "cpu")}
    rec["model"] = sum(p.numel() * p.element_size() for p in model.parameters())
    rec["shape"] = [int(model.config.num_hidden_layers), int(model.config.num_attention_heads)]
    print(json.dumps(rec))


def child(args, name: str, length: int, profile: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--child", name, "--child-length", str(length), "--threads", str(args.threads),
           "--repeats", str(args.repeats), "--timeout-per-method", str(args.timeout_per_method),
           "--method-repeats", str(args.method_repeats), "--model", args.model, "--unit-logits", args.unit_logits,
           "--generated", str(args.generated)]
    cmd += ["--paired"] if args.paired else []
    cmd += ["--profile", name] if profile else []
    p = subprocess.run(cmd, capture_output=True, text=True)
    if profile:
        print(p.stderr[-6000:])
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


# --- growth and the report -----------------------------------------------------------------------------------------

def power_fit(lengths, values) -> tuple[float, float]:
    """(exponent k, scale a) of values = a * L^k, least squares in log-log over the positive points."""
    pts = [(math.log(L), math.log(v)) for L, v in zip(lengths, values) if v > 0]
    if len(pts) < 2:
        return float("nan"), float("nan")
    x, y = np.array(pts).T
    k, loga = np.polyfit(x, y, 1)
    return float(k), float(math.exp(loga))


def predict(history: dict, key: str, length: int) -> float:
    """The measured ``key`` extrapolated to ``length`` by the power law of the measured points (nan if < 2)."""
    Ls = sorted(history)
    k, a = power_fit(Ls, [history[L][key] for L in Ls])
    return a * length ** k if not math.isnan(k) else float("nan")


def skip_reason(args, history: dict, length: int, rank: int) -> str:
    if not history:
        return ""
    last = history[max(history)]
    if "timeout" in last:
        return f"ran past the {args.timeout_per_method} s budget at {max(history)} tokens"
    if rank < 2:
        return ""
    done = {L: r for L, r in history.items() if "wall" in r}
    t, m = predict(done, "wall", length), predict(done, "added", length)
    if t > args.timeout_per_method:
        return f"predicted {t:.0f} s > {args.timeout_per_method} s budget (power law of the measured times)"
    if m > args.max_added_gib * GIB:
        return f"predicted {m / GIB:.1f} GiB added > --max-added-gib {args.max_added_gib}"
    return ""


def linear_check(lengths, added) -> str:
    """Least-squares line of memory against length: slope, R^2, and the log-log exponent (1 linear, 2 quadratic)."""
    L, m = np.array(lengths, float), np.array(added, float)
    b, a = np.polyfit(L, m, 1)
    r2 = 1 - ((m - (a + b * L)) ** 2).sum() / max(((m - m.mean()) ** 2).sum(), 1e-12)
    k, _ = power_fit(lengths, added)
    return (f"added = {a / 2 ** 20:.0f} MiB + {b * 1024 / 2 ** 20:.1f} MiB per 1k tokens, R^2 {r2:.4f}, "
            f"log-log exponent {k:.2f} (1 = linear, 2 = quadratic)")


def fits_24gib(history: dict, model_bytes: int) -> str:
    """Where model + added memory passes 24 GiB: measured, or extrapolated from the points (lower bounds of
    budget-stopped runs included, and then said: the extrapolation is then optimistic)."""
    done = {L: r.get("added", r.get("added_partial")) for L, r in history.items()}
    done = {L: v for L, v in done.items() if v is not None}
    bounds = " incl. lower bounds" if any("added_partial" in r for r in history.values()) else ""
    over = [L for L, v in sorted(done.items()) if v + model_bytes > FIT_IN]
    if over:
        return f"measured: over 24 GiB at {over[0]} tokens"
    Ls = sorted(done)
    k, a = power_fit(Ls, [done[L] for L in Ls])
    if math.isnan(k) or k <= 0:
        return f"fits at every measured length (<= {max(Ls, default=0)}); no growth to extrapolate"
    limit = ((FIT_IN - model_bytes) / a) ** (1 / k)
    where = f"~{limit:,.0f} tokens" if limit < 1e7 else "beyond 10M tokens"
    return (f"extrapolated (power law, exponent {k:.2f}, from {len(Ls)} lengths up to {max(Ls)}{bounds}): "
            f"passes 24 GiB at {where}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--model", default="smollm2-135m", help="an option of conf/model (a local model)")
    ap.add_argument("--unit-logits", choices=("all", "last"), default="all",
                    help="the unit forward's logits: every position's, or the last one's (a large vocabulary at long "
                         "lengths: Gemma 3's 262k-token head makes 16 GiB of logits at 16k tokens)")
    ap.add_argument("--methods", nargs="+", default=None, help="options of conf/attribution (default: all)")
    ap.add_argument("--generated", type=int, default=0,
                    help="generated tokens of every input (default 0: a quarter of its length); per-token IFR's "
                         "attribution grows with generated x length")
    ap.add_argument("--threads", type=int, default=2, help="torch threads in every child")
    ap.add_argument("--repeats", type=int, default=3, help="forward passes per length (the median is the unit)")
    ap.add_argument("--timeout-per-method", type=int, default=300, help="seconds one method may run at one length")
    ap.add_argument("--max-added-gib", type=float, default=6.0, help="skip a method predicted to add more memory")
    ap.add_argument("--profile", default=None, help="also profile this method (cProfile) at the first length")
    ap.add_argument("--method-repeats", type=int, default=1, help="runs of each method per length (median)")
    ap.add_argument("--units", nargs="+", choices=UNITS, default=list(UNITS),
                    help="forward passes to measure as units (eager at 8k takes minutes per pass)")
    ap.add_argument("--paired", action="store_true",
                    help="time an sdpa forward before each method run in the same process; the median of the "
                         "per-pair ratios is printed (robust on a noisy machine)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-length", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.child:
        return run_child(args)

    methods = args.methods or all_methods()
    unknown = sorted(set(methods) - set(all_methods()))
    if unknown:
        sys.exit(f"--methods: no conf/attribution/<name>.yaml for {unknown}")
    lengths = sorted(args.lengths)
    which = "every position's" if args.unit_logits == "all" else "the last position's"
    print(f"{args.model} fp32 CPU, {args.threads} torch threads, lengths {lengths} "
          f"({f'{args.generated} tokens' if args.generated else '1/4'} generated), unit forward "
          f"with {which} logits, "
          f"budget {args.timeout_per_method} s per method and length, forward = median of {args.repeats}")
    hist: dict = {m: {} for m in (*UNITS, *methods)}
    model_bytes = 0
    for rank, L in enumerate(lengths):
        for u in UNITS:
            if u not in args.units:
                hist[u][L] = {"wall": float("nan"), "cpu": float("nan"), "added": 0}
                continue
            hist[u][L] = r = child(args, u, L)
            model_bytes = r.get("model", model_bytes)
            print(f"[{L:5d}] {u:22s} {r['wall']:8.2f} s wall {r['cpu']:8.2f} s cpu  +{r['added'] / 2 ** 20:7.0f} MiB",
                  flush=True)
        for m in methods:
            why = skip_reason(args, hist[m], L, rank)
            if why:
                print(f"[{L:5d}] {m:22s} skipped: {why}", flush=True)
                continue
            hist[m][L] = r = child(args, m, L)
            if "error" in r:
                print(f"[{L:5d}] {m:22s} {r['error']}", flush=True)
                continue
            if "timeout" in r:
                print(f"[{L:5d}] {m:22s} stopped at the {r['timeout']} s budget; peak added until then "
                      f"+{r['added_partial'] / 2 ** 20:.0f} MiB (a lower bound)", flush=True)
                continue
            if m == args.profile and rank == 0:
                print(f"profile of {m} at {L} tokens (cProfile, cumulative; adds its own overhead):")
                child(args, m, L, profile=True)
            paired = (f"paired {r['paired_ratio']['wall']:.2f}x wall {r['paired_ratio']['cpu']:.2f}x cpu of its sdpa "
                      f"fwd ({r['paired_sdpa']['wall']:.2f} s)  " if "paired_ratio" in r else "")
            units = "".join(f"{r['wall'] / hist[u][L]['wall']:7.2f}x {u.split('_')[1]} fwd "
                            f"(cpu {r['cpu'] / hist[u][L]['cpu']:.2f}x)  " for u in args.units)
            est = (f" (estimate {r['estimate'] / 2 ** 20:.0f}, measured/estimate {r['added'] / r['estimate']:.2f})"
                   if r.get("estimate") else "")
            print(f"[{L:5d}] {m:22s} {r['wall']:8.2f} s wall {r['cpu']:8.2f} s cpu  +{r['added'] / 2 ** 20:7.0f} MiB"
                  f"{est}  {units}{paired}{r['timings']}", flush=True)

    print("\nsummary, ratios to one forward pass: wall and cpu / eager forward, wall and cpu / sdpa forward; "
          "'-' not run")
    print(f"{'method':22s}" + "".join(f"{L:>26d}" for L in lengths))
    for m in methods:
        cells = []
        for L in lengths:
            r, e, s = hist[m].get(L, {}), hist["forward_eager"][L], hist["forward_sdpa"][L]
            cells.append(" ".join(f"{r[k] / u[k]:.2f}" for u in (e, s) for k in ("wall", "cpu"))
                         if "wall" in r else ("> budget" if "timeout" in r else "-"))
        print(f"{m:22s}" + "".join(f"{c:>26s}" for c in cells))
    print("\npeak memory added (MiB) and where model + added passes 24 GiB "
          f"(model weights {model_bytes / 2 ** 20:.0f} MiB)")
    for m in (*args.units, *methods):
        cells = [f"{r['added'] / 2 ** 20:.0f}" if "added" in r else
                 (f">={r['added_partial'] / 2 ** 20:.0f}" if "added_partial" in r else "-")
                 for r in (hist[m].get(L, {}) for L in lengths)]
        print(f"{m:22s}" + "".join(f"{c:>10s}" for c in cells) + "   " + fits_24gib(hist[m], model_bytes))
    for m in ("ifr_multi_hop", "ifr_multi_hop_both"):
        done = {L: r for L, r in hist.get(m, {}).items() if "wall" in r}
        if not done:
            continue
        print(f"\n{m}: goal <= 1.3x one forward pass at every length")
        for L, r in sorted(done.items()):
            ratios = [(f"{k} {u.split('_')[1]}", r[k] / hist[u][L][k]) for u in args.units for k in ("wall", "cpu")]
            ratios += [(f"{k} paired sdpa", r["paired_ratio"][k]) for k in ("wall", "cpu") if "paired_ratio" in r]
            print(f"  {L:5d}: " + ", ".join(f"{name} forward {x:.2f}x ({'met' if x <= 1.3 else 'MISSED'})"
                                            for name, x in ratios))
        if len(done) >= 2:
            print(f"  memory: {linear_check(sorted(done), [done[L]['added'] for L in sorted(done)])}")
            L = max(done)
            layers, heads = done[L].get("shape", (30, 9))
            print(f"  for scale: one layer's attention probabilities at {L} tokens ({heads} heads, fp32) are "
                  f"{heads * L * L * 4 / 2 ** 20:.0f} MiB, all {layers} layers "
                  f"{layers * heads * L * L * 4 / 2 ** 20:.0f} MiB")


if __name__ == "__main__":
    main()
