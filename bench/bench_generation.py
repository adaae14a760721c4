"""Generation throughput of the ``hf`` generator: generated tokens per second at several batch sizes, and the ratio to
batch size 1 (SmolLM2-135M, the offline default, unless --model-path says otherwise).

    python bench/bench_generation.py [--batch-sizes 1,4,16] [--prompts 16] [--max-new-tokens 32] [--device auto]

The prompts are the MoreHopQA questions of the packaged sample, sent with the sampling stage's system prompt through the
model's chat template (greedy, stop at EOS). Every batch size generates for the same prompts; tokens are the ones
actually generated (up to and including EOS), so a batch that waits for its longest row is charged for it in time, not
in tokens. Prints one row per batch size: seconds, generated tokens, tokens/s and the ratio to batch size 1.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch-sizes", default="1,4,16")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--model-path", default=None, help="any model.path (default: the packaged SmolLM2)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from ctxbench.datasets import morehopqa_sample
    from ctxbench.generators import GenerationRequest
    from ctxbench.generators.hf import HFGenerator
    from ctxbench.models import ModelConfig, load_causal_lm
    from ctxbench.sampling import GENERATION_SYSTEM_PROMPT

    cfg = ModelConfig(device=args.device, dtype=args.dtype)
    if args.model_path:
        cfg = ModelConfig(name="bench", path=args.model_path, device=args.device, dtype=args.dtype)
    lm = load_causal_lm(cfg, cache_dir=ROOT / ".cache")
    rows = json.loads(morehopqa_sample().read_text(encoding="utf-8"))
    questions = [r["question"] for r in rows][:args.prompts]
    reqs = [GenerationRequest(str(i), [{"role": "system", "content": GENERATION_SYSTEM_PROMPT},
                                       {"role": "user", "content": q}]) for i, q in enumerate(questions)]
    sizes = [int(x) for x in args.batch_sizes.split(",")]
    print(f"model {cfg.path} on {lm.device} ({next(lm.model.parameters()).dtype}), torch threads "
          f"{torch.get_num_threads()}, {len(reqs)} prompts, max_new_tokens {args.max_new_tokens}, greedy")

    warm = HFGenerator(batch_size=1, max_new_tokens=4)
    warm.use_lm(lm)
    warm.generate(reqs[:1])
    results = []
    base = None
    print(f"{'batch':>5} {'seconds':>8} {'tokens':>7} {'tok/s':>8} {'ratio':>6}")
    for bs in sizes:
        gen = HFGenerator(batch_size=bs, max_new_tokens=args.max_new_tokens)
        gen.use_lm(lm)
        if lm.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = gen.generate(reqs)
        if lm.device.type == "cuda":
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
        errors = [g.error for g in out if g.error]
        if errors:
            raise SystemExit(f"batch size {bs}: {len(errors)} requests failed, e.g. {errors[0]}")
        toks = sum(g.completion_tokens for g in out)
        rate = toks / secs
        base = base or rate
        results.append({"batch_size": bs, "seconds": secs, "tokens": toks, "tokens_per_s": rate,
                        "ratio_to_bs1": rate / base})
        print(f"{bs:>5} {secs:>8.2f} {toks:>7} {rate:>8.1f} {rate / base:>6.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": cfg.path, "device": str(lm.device), "results": results},
                                              indent=2))


if __name__ == "__main__":
    main()
