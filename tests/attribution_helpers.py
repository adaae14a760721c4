"""Tiny randomly initialised decoders and a fake tokenizer for the attribution tests."""

from __future__ import annotations

import torch

VOCAB = 64


def tiny_model(family: str, seed: int = 0):
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, Qwen2Config, Qwen3Config

    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128)
    if family == "llama":
        cfg = LlamaConfig(num_key_value_heads=2, max_position_embeddings=256, attention_bias=True, **common)
    elif family == "qwen2":  # q/k/v biases, no o bias, GQA
        cfg = Qwen2Config(num_key_value_heads=2, max_position_embeddings=256, **common)
    elif family == "qwen3":
        cfg = Qwen3Config(num_key_value_heads=2, max_position_embeddings=256, head_dim=16, **common)
    elif family == "gpt2":
        cfg = GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=256)
    else:
        raise ValueError(family)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    with torch.no_grad():  # random init leaves biases/norm weights at 0/1; perturb them so they are exercised
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


class FakeTokenizer:
    """Token i decodes to TEXT[i]; a few ids are stop tokens ("," "." " "); eos = VOCAB - 1."""

    eos_token_id = VOCAB - 1
    STOP = {3: ",", 4: ".", 5: "  "}

    def decode(self, ids):
        return "".join(self.STOP.get(int(i), f" w{int(i)}") for i in ids)


def make_input(T: int = 14, gen_start: int = 9, template: int = 2, seed: int = 1, eos: bool = True, ids=None):
    from ctxbench.prompts.formats import ModelInput

    g = torch.Generator().manual_seed(seed)
    if ids is None:
        ids = torch.randint(6, VOCAB - 1, (T,), generator=g)
    ids = torch.as_tensor(ids).clone()
    if eos:
        ids[-1] = FakeTokenizer.eos_token_id
    pp = torch.arange(template, gen_start - 1)  # template tokens at the start and one just before generation
    return ModelInput(input_ids=ids, prompt_positions=pp, prompt_offsets=[], gen_start=gen_start, text="")


def method_classes() -> dict:
    """Every attribution class by its method name (what conf/attribution/<name>.yaml targets)."""
    from ctxbench import attribution as A

    classes = (A.SpanIFRAttributor, A.AllPositionsIFRAttributor, A.MultiHopIFRAttributor, A.MultiHopBothAttributor,
               A.AttentionAttributor, A.InputXGradientAttributor, A.IntegratedGradientsAttributor, A.RandomAttributor,
               A.AttnLRPAttributor, A.FTAttnLRPAttributor, A.PerturbationAttributor, A.ContextCiteAttributor)
    return {cls.name: cls for cls in classes}


def make(method: str, **params):
    return method_classes()[method](**params)
