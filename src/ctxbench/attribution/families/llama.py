"""Llama-like decoders: Llama, Mistral, Qwen2, Qwen3 (with its q/k norms); RMSNorm, grouped-query attention, RoPE,
optional biases, optional sliding window."""

from __future__ import annotations

import torch

from ctxbench.attribution.families.base import TINY, FamilyAdapter, UnsupportedModelError, _linear, _w


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (N, heads, dh); cos/sin: (N, dh). The half-rotation convention of Llama/Qwen/Mistral in transformers."""
    return x * cos[:, None, :] + _rotate_half(x) * sin[:, None, :]


class LlamaLikeAdapter(FamilyAdapter):
    """Llama / Mistral / Qwen2 / Qwen3 (and other decoders with the same q/k/v/o_proj + input/post_attention norms)."""

    # Sandwich-norm families put a norm on the attention output before the residual add: x_mid is then no longer
    # x_prev + sum of head outputs, so the decomposition (and IFR as specified) does not hold.
    _FORBIDDEN = ("post_self_attn_layernorm", "post_attention_norm", "pre_feedforward_layernorm")

    def __init__(self, model, dtype: torch.dtype = torch.float32):
        super().__init__(model, model.base_model.layers, dtype)
        first = self._layers[0]
        for name in self._FORBIDDEN:
            if hasattr(first, name):
                raise UnsupportedModelError(f"{type(first).__name__} has '{name}': attention output is re-normalised "
                                            "before the residual add, IFR's decomposition does not apply")
        a = first.self_attn
        cfg = model.config
        self.head_dim = int(a.head_dim)
        self.n_heads = a.q_proj.out_features // self.head_dim
        self.n_kv_heads = a.k_proj.out_features // self.head_dim
        self.d_model = int(cfg.hidden_size)
        if getattr(cfg, "attn_logit_softcapping", None):
            raise UnsupportedModelError("attention logit soft-capping is not supported")

    def values(self, li, h):
        return _linear(h, self.attn(li).v_proj).view(h.shape[0], self.n_kv_heads, self.head_dim)

    def queries(self, li, h, positions, pos_emb):
        a = self.attn(li)
        q = _linear(h, a.q_proj).view(h.shape[0], self.n_heads, self.head_dim)
        if getattr(a, "q_norm", None) is not None:  # Qwen3: per-head RMSNorm before RoPE
            q = a.q_norm(q)
        cos, sin = pos_emb
        return _rope(q, cos[positions], sin[positions])

    def keys(self, li, h, pos_emb):
        a = self.attn(li)
        k = _linear(h, a.k_proj).view(h.shape[0], self.n_kv_heads, self.head_dim)
        if getattr(a, "k_norm", None) is not None:
            k = a.k_norm(k)
        cos, sin = pos_emb
        n = h.shape[0]
        return _rope(k, cos[:n], sin[:n])

    def out_blocks(self, li):
        return self._cached_out_blocks(li, lambda: _w(self.attn(li).o_proj.weight, self.dtype)  # (d, H*dh)
                                       .view(self.d_model, self.n_heads, self.head_dim).permute(1, 2, 0))

    def out_bias(self, li):
        b = self.attn(li).o_proj.bias
        return None if b is None else _w(b, self.dtype)

    def sliding_window(self, li):
        sw = getattr(self.attn(li), "sliding_window", None)
        return int(sw) if sw else None

    def lrp_plan(self, li):
        layer, attn = self._layers[li], self.attn(li)
        mlp = getattr(layer, "mlp", None)
        if mlp is None or not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn")):
            raise UnsupportedModelError(f"{type(layer).__name__}: AttnLRP needs a gated MLP with gate_proj, up_proj, "
                                        "down_proj and act_fn")
        # q and k share the uniform rule of Q K^T, v and the attention weights that of their product (AttnLRP)
        linears = [(attn.q_proj, 0.25), (attn.k_proj, 0.25), (attn.v_proj, 0.5), (attn.o_proj, 1.0),
                   (mlp.gate_proj, 1.0), (mlp.up_proj, 1.0), (mlp.down_proj, 1.0)]
        return linears, mlp.act_fn, mlp.down_proj

    label = "Llama/Mistral/Qwen2/Qwen3-like decoders"

    @classmethod
    def tiny_configs(cls, vocab_size: int) -> dict:
        from transformers import LlamaConfig, Qwen2Config, Qwen3Config

        common = dict(vocab_size=vocab_size, num_key_value_heads=2, max_position_embeddings=256, **TINY)
        return {"llama": LlamaConfig(attention_bias=True, **common),
                "qwen2": Qwen2Config(**common),  # q/k/v biases, no o bias, GQA
                "qwen3": Qwen3Config(head_dim=16, **common)}  # q/k norms

    @classmethod
    def matches(cls, model) -> bool:
        layers = getattr(getattr(model, "base_model", None), "layers", None)
        if layers is None or not len(layers):
            return False
        a = getattr(layers[0], "self_attn", None)
        return all(hasattr(a, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")) and \
            hasattr(layers[0], "post_attention_layernorm")
