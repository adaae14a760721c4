"""GPT-2: LayerNorm, a fused qkv ``Conv1D`` with biases, absolute position embeddings."""

from __future__ import annotations

import torch

from ctxbench.attribution.families.base import TINY, FamilyAdapter, _w


class GPT2Adapter(FamilyAdapter):
    """GPT-2: LayerNorm, fused qkv Conv1D (weight is (in, out)), biases everywhere, absolute position embeddings."""

    attn_name = "attn"
    mid_name = "ln_2"

    def __init__(self, model, dtype: torch.dtype = torch.float32):
        super().__init__(model, model.base_model.h, dtype)
        a = self._layers[0].attn
        self.n_heads = self.n_kv_heads = int(a.num_heads)
        self.head_dim = int(a.head_dim)
        self.d_model = int(a.embed_dim)

    def _part(self, li, h, k: int) -> torch.Tensor:
        a, d = self.attn(li), self.d_model
        w = _w(a.c_attn.weight, h.dtype)[:, k * d:(k + 1) * d]
        b = _w(a.c_attn.bias, h.dtype)[k * d:(k + 1) * d]
        return torch.addmm(b, h, w).view(h.shape[0], self.n_heads, self.head_dim)

    def values(self, li, h):
        return self._part(li, h, 2)

    def queries(self, li, h, positions, pos_emb):
        return self._part(li, h, 0)

    def keys(self, li, h, pos_emb):
        return self._part(li, h, 1)

    def out_blocks(self, li):
        return self._cached_out_blocks(li, lambda: _w(self.attn(li).c_proj.weight, self.dtype)
                                       .view(self.n_heads, self.head_dim, self.d_model))

    def out_bias(self, li):
        return _w(self.attn(li).c_proj.bias, self.dtype)

    def lrp_plan(self, li):
        attn, mlp, d = self.attn(li), self._layers[li].mlp, self.d_model
        share = torch.cat([torch.full((2 * d,), 0.25), torch.full((d,), 0.5)])  # c_attn's columns are q | k | v
        return [(attn.c_attn, share), (attn.c_proj, 1.0), (mlp.c_fc, 1.0), (mlp.c_proj, 1.0)], mlp.act, None

    label = "GPT-2"

    @classmethod
    def tiny_configs(cls, vocab_size: int) -> dict:
        from transformers import GPT2Config

        return {"gpt2": GPT2Config(vocab_size=vocab_size, n_embd=TINY["hidden_size"], n_layer=TINY["num_hidden_layers"],
                                   n_head=TINY["num_attention_heads"], n_positions=256)}

    @classmethod
    def matches(cls, model) -> bool:
        return getattr(model.config, "model_type", "") == "gpt2"
