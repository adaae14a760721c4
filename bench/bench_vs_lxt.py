"""attnlrp against the lxt package (LRP-eXplains-Transformers 2.1, Achtibat et al., "AttnLRP", ICML 2024) on SmolLM2.

lxt 2.1 runs under transformers 4.52 (it does not import under transformers 5), so the two sides run in two
interpreters and meet in files (docs/attribution.md, "Compared with lxt 2.1", has the venv recipe):

    .venv/bin/python bench/bench_vs_lxt.py ours --dir /tmp/lxt_cmp      # token ids and our relevances
    /path/to/lxt-venv/bin/python bench/bench_vs_lxt.py lxt --dir /tmp/lxt_cmp
    .venv/bin/python bench/bench_vs_lxt.py compare --dir /tmp/lxt_cmp

``--variant`` (lxt and compare) runs lxt with one rule changed instead (plain gradient, q/k halved, RMSNorm unpatched,
CP-LRP), to show how far that moves the figures: ``lxt --variant plain --examples 1`` then ``compare --variant plain``.

Inputs: the first ``--examples`` packaged MoreHopQA rows, their prompt cut to ``--prompt-tokens`` tokens, then
"The answer is <gold answer>." and EOS (prompt format bare), float32, eager attention on both sides. Explained: every
generated token's logit where it is predicted; relevance = (input embeddings x gradient) summed over the hidden size,
the backward pass seeded with 1 (lxt's examples seed it with the logit itself, which scales a row by that logit).
Printed per example: the largest |difference| of the relevances, alone and relative to the row's largest |relevance|
(max over rows), the lowest Pearson and Spearman correlations over rows (Spearman over each row's causal past), the
mean top-10 overlap, and each side's conservation (relevance sum / logit).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def model_folder() -> Path:
    """The dequantised SmolLM2 the project caches (``.cache/dequantized``), in transformers' folder layout."""
    found = sorted((ROOT / ".cache" / "dequantized").glob("SmolLM2-135M-Instruct*"))
    found = [f for f in found if f.is_dir() and (f / "config.json").is_file()]
    if not found:
        raise SystemExit("no dequantised SmolLM2 under .cache/dequantized: run the README's main command once")
    return found[0]


def ours(out: Path, examples: int, prompt_tokens: int) -> None:
    import torch

    from ctxbench.attribution.attnlrp import LRPPass
    from ctxbench.attribution.base import InputContext
    from ctxbench.attribution.baselines import explaining
    from ctxbench.datasets.morehopqa import load_morehopqa, morehopqa_sample
    from ctxbench.models import ModelConfig, load_causal_lm
    from ctxbench.prompts.formats import ModelInput

    lm = load_causal_lm(ModelConfig(device="cpu", dtype="float32"), need_attentions=True,
                        cache_dir=str(ROOT / ".cache"))
    model, tok = lm.model, lm.tokenizer
    records = []
    for ex in load_morehopqa(morehopqa_sample())[:examples]:
        prompt = tok(ex.prompt, add_special_tokens=True)["input_ids"][:prompt_tokens]
        gen = tok(f" The answer is {ex.metadata['answer']}.", add_special_tokens=False)["input_ids"] + \
            [tok.eos_token_id]
        ids = torch.tensor(prompt + gen)
        mi = ModelInput(input_ids=ids, prompt_positions=torch.arange(len(prompt)), prompt_offsets=[],
                        gen_start=len(prompt), text="")
        ctx = InputContext.from_model_input(model, mi)
        with explaining(model):
            lp = LRPPass(model, ctx, 0.0, "eager")
            rel = torch.stack([lp.relevance(row) for row in torch.eye(ctx.G)]).double().numpy()
        records.append({"id": ex.example_id, "ids": ids.tolist(), "gen_start": len(prompt),
                        "logits": lp.logits.detach().double().tolist(), "relevance": rel.tolist()})
        print(f"ours: {ex.example_id}: T={len(ids)} G={ctx.G}")
    out.mkdir(parents=True, exist_ok=True)
    folder = getattr(model, "name_or_path", "") or str(model_folder())  # the folder the weights came from
    (out / "ours.json").write_text(json.dumps({"model": folder, "examples": records}))


def _stand_in_torchvision() -> None:
    """lxt 2.1 imports torchvision for its ViT rules; the LLaMA rules do not use it, and a torchvision build that
    matches a CPU torch is not always at hand: an empty stand-in takes its place."""
    import importlib.machinery
    import sys
    import types

    import torch

    names = ("torchvision", "torchvision.models", "torchvision.models.vision_transformer")
    for name in names:
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = mod
    sys.modules["torchvision"].models = sys.modules["torchvision.models"]
    sys.modules["torchvision.models"].vision_transformer = sys.modules["torchvision.models.vision_transformer"]
    sys.modules["torchvision.models.vision_transformer"].nn = torch.nn


VARIANTS = ("attnlrp", "plain", "qk_half", "rmsnorm_unpatched", "cp_lrp")


def _lxt_patch_map(variant, ml):
    """lxt's patch map for ``variant``, built from lxt's own patch functions: "attnlrp" lxt's default map for Llama;
    "plain" no patch (plain gradient x input); "qk_half" AttnLRP with the q and k gradients halved instead of
    quartered; "rmsnorm_unpatched" AttnLRP without the RMSNorm patch; "cp_lrp" lxt's CP-LRP map. Only "attnlrp" is
    the comparison: the others show how far one changed rule moves the figures."""
    from functools import partial

    from lxt.efficient import patches as lp
    from lxt.efficient.models.llama import attnLRP, cp_LRP
    from lxt.efficient.rules import divide_gradient

    if variant == "plain":
        return {}
    if variant in ("attnlrp", "cp_lrp"):
        return attnLRP if variant == "attnlrp" else cp_LRP
    mlp = {ml.LlamaMLP: partial(lp.patch_method, lp.gated_mlp_forward)}
    if variant == "rmsnorm_unpatched":
        return {**mlp, ml: lp.patch_attention}

    def halve_qkv(module):  # the eager attention function, with q, k and v gradients halved
        fn = module.eager_attention_forward

        def attention(mod, q, k, v, *args, **kwargs):
            return fn(mod, divide_gradient(q, 2), divide_gradient(k, 2), divide_gradient(v, 2), *args, **kwargs)
        module.eager_attention_forward = attention
        return True
    return {**mlp, ml.LlamaRMSNorm: partial(lp.patch_method, lp.rms_norm_forward), ml: halve_qkv}


def _lxt_file(out: Path, variant: str) -> Path:
    return out / ("lxt.json" if variant == "attnlrp" else f"lxt_{variant}.json")


def lxt_side(out: Path, variant: str, examples: int) -> None:
    import torch

    try:
        import torchvision  # noqa: F401
    except Exception:
        _stand_in_torchvision()
    from lxt.efficient import monkey_patch
    from transformers import AutoModelForCausalLM
    from transformers.models.llama import modeling_llama

    data = json.loads((out / "ours.json").read_text())
    monkey_patch(modeling_llama, _lxt_patch_map(variant, modeling_llama), verbose=False)
    # transformers 5 writes the rotary base under rope_parameters, which 4.x does not read (it would use 10,000)
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(data["model"])
    written = json.loads((Path(data["model"]) / "config.json").read_text())
    if "rope_parameters" in written:
        config.rope_theta = written["rope_parameters"]["rope_theta"]
    model = AutoModelForCausalLM.from_pretrained(data["model"], config=config, torch_dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    for p in model.parameters():
        p.requires_grad_(False)
    records = []
    for ex in data["examples"][:examples]:
        ids = torch.tensor([ex["ids"]])
        gs = ex["gen_start"]
        rows, logits = [], []
        for t in range(ids.shape[1] - gs):
            embeds = model.get_input_embeddings()(ids).detach().requires_grad_()
            logit = model(inputs_embeds=embeds, use_cache=False).logits[0, gs + t - 1, ids[0, gs + t]]
            logit.backward()
            rows.append((embeds.grad * embeds).sum(-1)[0].double().tolist())
            logits.append(float(logit.detach()))
        records.append({"id": ex["id"], "logits": logits, "relevance": rows})
        print(f"lxt ({variant}): {ex['id']}: {len(rows)} rows")
    import transformers

    import lxt

    _lxt_file(out, variant).write_text(json.dumps({
        "transformers": transformers.__version__, "torch": torch.__version__, "lxt": getattr(lxt, "__version__", "2.1"),
        "variant": variant, "examples": records}))


def _ranks(x):
    import numpy as np

    r = np.empty(len(x))
    r[np.argsort(x, kind="stable")] = np.arange(len(x))
    return r


def compare(out: Path, variant: str) -> None:
    import numpy as np

    a = json.loads((out / "ours.json").read_text())["examples"]
    meta = json.loads(_lxt_file(out, variant).read_text())
    b = meta["examples"]
    print(f"lxt side ({variant}): transformers {meta['transformers']}, torch {meta['torch']}")
    for ea, eb in zip(a, b):
        ra, rb = np.array(ea["relevance"]), np.array(eb["relevance"])
        la, lb = np.array(ea["logits"]), np.array(eb["logits"])
        absdiff = np.abs(ra - rb).max()
        rel = max(np.abs(x - y).max() / np.abs(y).max() for x, y in zip(ra, rb))
        pearson = min(np.corrcoef(x, y)[0, 1] for x, y in zip(ra, rb))
        # Spearman over each row's causal past (prompt and earlier generated tokens; later columns are 0 on both)
        past = [(x[:ea["gen_start"] + t], y[:ea["gen_start"] + t]) for t, (x, y) in enumerate(zip(ra, rb))]
        spearman = min(np.corrcoef(_ranks(x), _ranks(y))[0, 1] for x, y in past)
        top = np.mean([len(set(np.argsort(-x)[:10]) & set(np.argsort(-y)[:10])) / 10 for x, y in zip(ra, rb)])
        cons_a = ra.sum(1) / la
        cons_b = rb.sum(1) / lb
        print(f"{ea['id']}: T={ra.shape[1]} G={ra.shape[0]}; logits max |diff| {np.abs(la - lb).max():.2e}; "
              f"relevance max |diff| {absdiff:.2e}, / row max {rel:.2e}; min Pearson {pearson:.7f}, "
              f"Spearman {spearman:.7f}; top-10 overlap {top:.2f}; "
              f"sum/logit ours {cons_a.min():.4f}..{cons_a.max():.4f}, lxt {cons_b.min():.4f}..{cons_b.max():.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("side", choices=("ours", "lxt", "compare"))
    ap.add_argument("--dir", default="/tmp/lxt_cmp")
    ap.add_argument("--examples", type=int, default=3, help="ours: the rows to take; lxt: the first that many of them")
    ap.add_argument("--variant", choices=VARIANTS, default="attnlrp",
                    help="lxt's rules (lxt, compare): attnlrp is the comparison, the others a rule changed")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    args = ap.parse_args()
    out = Path(args.dir)
    if args.side == "ours":
        ours(out, args.examples, args.prompt_tokens)
    elif args.side == "lxt":
        lxt_side(out, args.variant, args.examples)
    else:
        compare(out, args.variant)


if __name__ == "__main__":
    main()
