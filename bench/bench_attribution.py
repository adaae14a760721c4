"""Attribution speed and memory on SmolLM2-135M (CPU): span multi-hop IFR vs per-token IFR vs a forward pass.

    python bench/bench_attribution.py [--prompt-tokens 1000] [--gen-tokens 300] [--repeats 2] [--skip-all-positions]

Prints, in one run: seconds of one plain forward pass with attentions (eager, output_attentions=True), of
``ifr_multi_hop`` (K=1) and ``ifr_multi_hop_both`` (K=1) with recomputed attention (capture pass eager or sdpa),
and of ``ifr_all_positions``; the ratios; and the peak resident memory added by one multi-hop attribution with
recomputed vs stored attention (each measured in a fresh child process, as the VmHWM rise of bench_length.measure).
Scaling with length, for every method: bench/bench_length.py.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench_length import measure  # noqa: E402 (the bench folder is on sys.path when a script in it runs)
from ctxbench.attribution import AllPositionsIFRAttributor, MultiHopBothAttributor, MultiHopIFRAttributor

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def load():
    from ctxbench.models import ModelConfig, load_causal_lm

    lm = load_causal_lm(ModelConfig(device="cpu", dtype="float32"), need_attentions=True, cache_dir=ROOT / ".cache")
    return lm.model, lm.tokenizer


def make_input(tok, n_prompt: int, n_gen: int):
    """Real text when the MoreHopQA sample is beside the checkout (random ids otherwise), cut to exact lengths."""
    from ctxbench.prompts.formats import ModelInput

    text = ""
    f = SHARED / "data" / "morehopqa" / "morehopqa_final_150samples.json"
    if f.exists():
        rows = json.loads(f.read_text())
        text = " ".join("".join(s) for r in rows for _, s in r["context"])
    ids = tok(text, add_special_tokens=False).input_ids if text else []
    if len(ids) < n_prompt + n_gen:
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(100, len(tok), (n_prompt + n_gen,), generator=g).tolist()
    ids = ids[:n_prompt + n_gen - 1] + [tok.eos_token_id]
    mi = ModelInput(input_ids=torch.tensor(ids), prompt_positions=torch.arange(n_prompt), prompt_offsets=[],
                    gen_start=n_prompt, text="")
    sink = (n_gen - 21, n_gen - 2)  # a 20-token answer before EOS, the rest is the CoT
    return mi, sink, (0, sink[0] - 1)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def child_peak(args, mode: str) -> float:
    """Peak RSS (MiB) added by one ifr_multi_hop call, measured in a fresh process."""
    cmd = [sys.executable, __file__, "--child", mode, "--prompt-tokens", str(args.prompt_tokens),
           "--gen-tokens", str(args.gen_tokens)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    return float(out)


def run_child(args):
    model, tok = load()
    mi, sink, think = make_input(tok, args.prompt_tokens, args.gen_tokens)
    with torch.no_grad():  # warm the allocator and kernels with a short pass, so only attribution memory is counted
        model(mi.input_ids[None, :32])
    if args.child == "forward_attn":
        def fn():
            with torch.no_grad():
                model(mi.input_ids[None], output_attentions=True)
    else:
        att = MultiHopIFRAttributor(hops=1, recompute_attention=(args.child == "recompute"))

        def fn():
            att.attribute(model, tok, mi, sink, think)
    print(measure(fn)["added"] / 2 ** 20)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt-tokens", type=int, default=1000)
    ap.add_argument("--gen-tokens", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-all-positions", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--only-memory", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--child", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        return run_child(args)

    if args.only_memory:
        return memory(args)
    model, tok = load()
    mi, sink, think = make_input(tok, args.prompt_tokens, args.gen_tokens)
    print(f"SmolLM2-135M fp32 CPU, torch threads {torch.get_num_threads()}: prompt {mi.P} + generated {mi.G} tokens, "
          f"sink {sink}, thinking {think}")
    ids = mi.input_ids[None]

    def fwd():
        with torch.no_grad():
            model(ids, output_attentions=True)

    fwd()  # warm-up
    runs = [
        ("multi_hop (sdpa capture, default)", MultiHopIFRAttributor(hops=1)),
        ("multi_hop (eager capture)", MultiHopIFRAttributor(hops=1, forward_attn_impl=None)),
        ("multi_hop_both (default)", MultiHopBothAttributor(hops=1)),
        ("multi_hop K=3 (default)", MultiHopIFRAttributor(hops=3)),
        ("multi_hop (stored eager attention)", MultiHopIFRAttributor(hops=1, recompute_attention=False)),
    ]
    # interleaved repeats, minimum kept: the machine may be shared, and contention only ever adds time
    fwd_ts, res, last = [], {n: [] for n, _ in runs}, {}
    for _ in range(args.repeats):
        fwd_ts.append(timed(fwd))
        for name, att in runs:
            res[name].append(timed(lambda: last.__setitem__(name, att.attribute(model, tok, mi, sink, think))))
    t_fwd = min(fwd_ts)
    res = {n: min(v) for n, v in res.items()}
    print(f"{'forward pass with attentions':40s} {t_fwd:8.2f} s   1.00x")
    for name, t in res.items():
        tm = last[name].timings
        print(f"{name:40s} {t:8.2f} s   {t / t_fwd:.2f}x forward  (capture {tm['capture']:.2f} s, "
              f"attribution {tm['attribution']:.2f} s)")
    if not args.skip_all_positions:
        att = AllPositionsIFRAttributor()
        t_all = timed(lambda: att.attribute(model, tok, mi, None, None))
        best = res["multi_hop (sdpa capture, default)"]
        print(f"{'ifr_all_positions (per-token IFR)':40s} {t_all:8.2f} s   {t_all / t_fwd:.2f}x forward")
        print(f"per-token IFR / multi-hop IFR: {t_all / best:.1f}x  (paper: ~60x at 500 generated tokens, Qwen3-8B)")
    if not args.skip_memory:
        memory(args)


def memory(args):
    mem = {m: child_peak(args, m) for m in ("recompute", "stored", "forward_attn")}
    print(f"peak RSS added: multi_hop recomputed attention {mem['recompute']:.0f} MiB, stored attention "
          f"{mem['stored']:.0f} MiB; forward pass with attentions {mem['forward_attn']:.0f} MiB")


if __name__ == "__main__":
    main()
