"""Gemma 3 decoders (``Gemma3ForCausalLM``, ``model_type`` gemma3_text): the Llama-like attention block (grouped-query
attention, RoPE, per-head q/k RMSNorm) inside "sandwich" norms, sliding-window and global layers with RoPE bases of
their own, embeddings scaled by sqrt(d).

What makes IFR's decomposition hold here (Gemma Team, "Gemma 3 Technical Report", 2025; transformers'
``Gemma3DecoderLayer``): the attention output ``o_i = sum_{j,h} alpha_ij^h v_j^h W_O^h`` is normalised before the
residual add, ``x_mid_i = x_prev_i + g * o_i / rms(o_i)`` with the norm's gain ``g = 1 + w`` (Gemma's RMSNorm) and
``rms(o_i) = sqrt(mean(o_i^2) + eps)``. For the row's own forward pass the norm is the linear map
``o -> g * o / rms(o_i)``: the gain folds into W_O (``out_blocks``: ``W_O^h diag(g)``) and the row's scale
``1 / rms(o_i)`` into its attention weights (``row_scale``, read from the norm's input during the capture), so the
contributions ``c_ij^h = alpha_ij^h / rms(o_i) * v_j^h W_O^h diag(g)`` sum exactly to the residual update, as for a
pre-norm decoder. ``x_mid`` is the input of ``pre_feedforward_layernorm`` (the residual after the attention block);
the feed-forward block, post-normed too, is token-local and outside the decomposition, as in IFR for any decoder.

AttnLRP (``lrp_plan``, inherited): the gated feed-forward block has the Llama names (``gate_proj``, ``up_proj``,
``down_proj``, ``act_fn``, here GELU-tanh: the identity rule), and every one of the four norms per layer, the q/k norms
and the final norm is a Gemma RMSNorm, whose normaliser the rules freeze (``lrp_rules.frozen_norm``).
"""

from __future__ import annotations

import torch

from ctxbench.attribution.families.base import TINY, _w
from ctxbench.attribution.families.llama import LlamaLikeAdapter


class Gemma3Adapter(LlamaLikeAdapter):
    mid_name = "pre_feedforward_layernorm"
    post_attn_norm_name = "post_attention_layernorm"
    _FORBIDDEN = ()

    def _gain(self, li: int) -> torch.Tensor:
        return 1.0 + _w(self.post_attn_norm(li).weight, self.dtype)  # Gemma's RMSNorm multiplies by (1 + w)

    def out_blocks(self, li):
        return self._cached_out_blocks(li, lambda: (_w(self.attn(li).o_proj.weight, self.dtype)
                                                    .view(self.d_model, self.n_heads, self.head_dim)
                                                    .permute(1, 2, 0) * self._gain(li)))

    def out_bias(self, li):
        b = self.attn(li).o_proj.bias
        return None if b is None else _w(b, self.dtype) * self._gain(li)

    def row_scale(self, li: int, o: torch.Tensor) -> torch.Tensor:
        """``1 / rms(o_i)`` of the attention outputs ``o`` (R, d) entering the post-attention norm."""
        o = o.to(torch.float64 if self.dtype == torch.float64 else torch.float32)
        return torch.rsqrt(o.pow(2).mean(-1) + self.post_attn_norm(li).eps).to(self.dtype)

    label = "Gemma 3"

    @classmethod
    def tiny_configs(cls, vocab_size: int) -> dict:
        """A sliding-window layer (4 tokens) then a global one, each with its own RoPE base, sandwich norms, q/k
        norms, GQA, scaled embeddings."""
        from transformers import Gemma3TextConfig

        return {"gemma3": Gemma3TextConfig(vocab_size=vocab_size, num_key_value_heads=2, max_position_embeddings=256,
                                           head_dim=16, sliding_window=4, query_pre_attn_scalar=16,
                                           layer_types=["sliding_attention", "full_attention"], **TINY)}

    @classmethod
    def matches(cls, model) -> bool:
        layers = getattr(getattr(model, "base_model", None), "layers", None)
        return bool(layers is not None and len(layers)) and \
            all(hasattr(layers[0], n) for n in ("self_attn", "pre_feedforward_layernorm", "post_attention_layernorm",
                                                "post_feedforward_layernorm"))
