"""Tiny randomly initialised decoders, fake tokenizers and toy model inputs for the attribution and scoring tests;
every attribution method by its name; a short story for the real SmolLM2."""

from __future__ import annotations

import torch

VOCAB = 64


def family_members() -> list[str]:
    """Every decoder the attribution families read, one tiny model each (``families.tiny_configs``)."""
    from ctxbench.attribution.families import tiny_configs

    return list(tiny_configs(VOCAB))


def tiny_model(family: str, seed: int = 0):
    """A 2-layer decoder of ``family`` (a member of ``family_members``: llama, qwen2, qwen3, gemma3, gpt2) over
    ``VOCAB`` tokens, from its family module's own tiny config, eager attention, with its biases and norm weights
    perturbed away from their 0/1 initial values."""
    from transformers import AutoModelForCausalLM

    from ctxbench.attribution.families import tiny_configs

    torch.manual_seed(seed)
    configs = tiny_configs(VOCAB)
    if family not in configs:
        raise ValueError(f"{family}: not a family member ({', '.join(configs)})")
    model = AutoModelForCausalLM.from_config(configs[family], attn_implementation="eager").eval()
    with torch.no_grad():  # random init leaves biases/norm weights at 0/1; perturb them so they are exercised
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def random_llama(vocab_size: int, *, hidden_size: int = 64, num_hidden_layers: int = 2, num_attention_heads: int = 4,
                 num_key_value_heads: int = 2, intermediate_size: int = 128, max_position_embeddings: int = 512,
                 attn_implementation: str | None = None, seed: int = 0):
    """A Llama as transformers initialises it (seeded), over any vocabulary (a real tokenizer's: ``len(tok)``)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                      num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads,
                      intermediate_size=intermediate_size, max_position_embeddings=max_position_embeddings)
    extra = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    return AutoModelForCausalLM.from_config(cfg, **extra).eval()


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


# --- a toy input in sentences (perturbation, ContextCite) ----------------------------------------------------------

EOS = VOCAB - 1
# template (2) | prompt: 3 sentences | one template token | generation: 3 sentences + EOS
IDS = [1, 2, 10, 11, 4, 12, 13, 14, 4, 15, 16, 9, 20, 21, 4, 22, 23, 4, 24, EOS]
GEN_START = 12
PROMPT_UNITS = [[0, 1, 2], [3, 4, 5, 6], [7, 8]]  # prompt-token indices
GEN_UNITS = [[0, 1, 2], [3, 4, 5], [6], [7]]  # generated-token indices; the EOS alone


class SentenceTokenizer:
    """Token 4 decodes to ".", any other id i to " W<i>" (capitalised words, so a "." ends a sentence)."""

    eos_token_id = EOS

    def decode(self, ids):
        return "".join("." if int(i) == 4 else f" W{int(i)}" for i in ids)


# --- every attribution method by name ------------------------------------------------------------------------------

def method_classes() -> dict:
    """Every attribution class by its method name (what conf/attribution/<name>.yaml targets)."""
    from ctxbench import attribution as A

    classes = (A.SpanIFRAttributor, A.AllPositionsIFRAttributor, A.MultiHopIFRAttributor, A.MultiHopBothAttributor,
               A.AttentionAttributor, A.InputXGradientAttributor, A.IntegratedGradientsAttributor, A.RandomAttributor,
               A.AttnLRPAttributor, A.FTAttnLRPAttributor, A.PerturbationAttributor, A.ContextCiteAttributor,
               A.CopyMatchAttributor, A.PositionAttributor)
    return {cls.name: cls for cls in classes}


def make(method: str, **params):
    return method_classes()[method](**params)


# --- a short story for the real SmolLM2 ----------------------------------------------------------------------------

STORY_PROMPT = ("The red key is in the blue box. The green key is under the table. Alice took the blue box to the "
                "garden.\nQuestion: Where is the red key?")
STORY_TARGET = "The red key is in the blue box, and Alice took the box to the garden.\nThe garden."


def story_input(tok):
    """``STORY_PROMPT`` then ``STORY_TARGET`` and EOS as the generation, in ``tok``'s tokens, without a template."""
    from ctxbench.prompts.formats import ModelInput

    p_ids = tok(STORY_PROMPT, add_special_tokens=False).input_ids
    g_ids = tok(STORY_TARGET, add_special_tokens=False).input_ids + [tok.eos_token_id]
    return ModelInput(input_ids=torch.tensor(p_ids + g_ids), prompt_positions=torch.arange(len(p_ids)),
                      prompt_offsets=[], gen_start=len(p_ids), text=STORY_PROMPT)
