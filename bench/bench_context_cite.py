"""context_cite before and after it followed the context-cite package (issue 35), on SmolLM2 and real MoreHopQA rows.

    .venv/bin/python bench/bench_context_cite.py [--examples 3] [--ablations 64] [--before-rev 60ee466]

Each example: a packaged MoreHopQA row, explained continuation "The answer is <gold answer>." (prompt format table1),
the masks drawn as the method draws them. "before" is the method at ``--before-rev`` (EOS overwrite, summed
log-probability, an unscaled penalty, one held-out share; the question a source like any sentence), loaded from git;
"after" is the method now (deletion, the logit of the span's probability, the package's penalty, 5-fold R^2, the
question kept out). Each is set against the context-cite package (0.0.4) run on the same sources and masks (its
ablated passes, logit-probabilities and solver): the largest weight difference relative to the package's largest
weight, the Spearman correlation of the weights, and whether the same sources are non-zero. Also printed: each
version's own R^2 and its time per example.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_old(rev: str):
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:src/ctxbench/attribution/context_cite.py"],
                         capture_output=True, text=True, check=True).stdout
    path = Path("/tmp") / f"context_cite_{rev}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"context_cite_{rev}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def package_weights(model, tok, mi, masks, rows, alpha, dropped):
    import nltk
    import numpy as np

    nltk.download = lambda *args, **kwargs: False  # the package fetches Punkt on import; nothing here uses it
    from context_cite import utils as ccu
    from context_cite.solver import LassoRegression

    ids = mi.input_ids.tolist()
    prompt_ids, response_ids = ids[:mi.gen_start], ids[mi.gen_start:]
    create = ccu._create_mask
    ccu._create_mask = lambda num_sources, alpha_, seed: masks[seed]
    try:
        def get_prompt_ids(mask):
            gone = {p for j in np.flatnonzero(~mask) for p in dropped[j]}
            return [t for i, t in enumerate(prompt_ids) if i not in gone]

        m, logit_probs = ccu.get_masks_and_logit_probs(model, tok, len(masks), masks.shape[1], get_prompt_ids,
                                                       response_ids, 0.5, 1)
    finally:
        ccu._create_mask = create
    out = ccu.aggregate_logit_probs(logit_probs[:, rows[0]:rows[-1] + 1])
    return LassoRegression(alpha).fit(m, out, len(rows))[0]


def compare(ours, theirs) -> str:
    import numpy as np
    from scipy.stats import spearmanr

    rel = np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-12)
    rho = spearmanr(ours, theirs).statistic if np.ptp(ours) > 0 and np.ptp(theirs) > 0 else float("nan")
    same = np.array_equal(ours != 0, theirs != 0)
    return f"max|dw|/max|w_pkg| {rel:.2e}, Spearman {rho:.3f}, same non-zero sources {same}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=3)
    ap.add_argument("--ablations", type=int, default=64)
    ap.add_argument("--before-rev", default="60ee466")
    args = ap.parse_args()

    import logging

    import numpy as np
    import torch

    from ctxbench.attribution import context_cite as new
    from ctxbench.attribution.base import InputContext
    from ctxbench.attribution.perturbation import SentenceUnits
    from ctxbench.datasets.morehopqa import load_morehopqa, morehopqa_sample
    from ctxbench.evaluation import prepare_example
    from ctxbench.example import CachedExample
    from ctxbench.models import ModelConfig, load_causal_lm

    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    old = load_old(args.before_rev)
    lm = load_causal_lm(ModelConfig(device="cpu", dtype="float32"), need_attentions=False,
                        cache_dir=str(ROOT / ".cache"))
    model, tok = lm.model, lm.tokenizer
    rows_data = load_morehopqa(morehopqa_sample())[:args.examples]
    print(f"SmolLM2-135M-Instruct, CPU, 1 thread; {args.ablations} ablations; MoreHopQA rows 0..{args.examples - 1}")
    for ex in rows_data:
        ex = CachedExample(prompt=ex.prompt, target=f"The answer is {ex.metadata['answer']}.", metadata=ex.metadata)
        mi = prepare_example(ex, tok, "table1").model_input
        ctx = InputContext.from_model_input(model, mi)
        units = SentenceUnits.of(tok, ctx)
        query = set(mi.query_tokens or [])
        sources = [u for u, c in enumerate(units.prompt) if not query.intersection(c.tolist())]
        rows = list(range(mi.G))
        dropped = lambda us: [[int(p) for p in mi.prompt_positions[units.prompt[u]]] for u in us]  # noqa: E731
        print(f"- {ex.example_id}: P={mi.P} G={mi.G}, {len(units.prompt)} sentences, {len(sources)} sources")
        # before
        rng = old.example_rng(0, mi.input_ids.numpy())
        masks_old = old.ablation_masks(rng, args.ablations, len(units.prompt), 0.5)
        t0 = time.perf_counter()
        res_old = old.ContextCiteAttributor(n_ablations=args.ablations).attribute(model, tok, mi)
        t_old = time.perf_counter() - t0
        w_old = np.array([res_old.matrix[0, c[0]] for c in units.prompt])
        pkg_old = package_weights(model, tok, mi, masks_old, rows, 0.01, dropped(range(len(units.prompt))))
        print(f"  before: held-out R^2 {res_old.info['heldout_r2']}, {t_old:.1f} s; vs package: "
              f"{compare(w_old, pkg_old)}")
        # after
        rng = new.example_rng(0, mi.input_ids.numpy())
        masks_new = new.ablation_masks(rng, args.ablations, len(sources), 0.5)
        t0 = time.perf_counter()
        res_new = new.ContextCiteAttributor(n_ablations=args.ablations).attribute(model, tok, mi)
        t_new = time.perf_counter() - t0
        w_new = np.array([res_new.matrix[0, units.prompt[u][0]] for u in sources])
        pkg_new = package_weights(model, tok, mi, masks_new, rows, 0.01, dropped(sources))
        print(f"  after:  5-fold R^2 {res_new.info['cv_r2']:.3f}, {t_new:.1f} s; vs package: "
              f"{compare(w_new, pkg_new)}")


if __name__ == "__main__":
    main()
