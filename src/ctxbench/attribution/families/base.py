"""What every decoder family's adapter offers (``FamilyAdapter``), and the errors and helpers they share.

A family is one module in this package: its adapter class says how to recognise a model of the family
(``matches``), where its layers, attention blocks and norms are, how to recompute queries, keys and values and read
the output projection W_O for IFR (``ctxbench.attribution.capture``), and which modules AttnLRP's rules apply to
(``lrp_plan``, ``ctxbench.attribution.lrp_rules``), what the refusal names it (``label``) and its members' tiny
configurations (``tiny_configs``: the tests build a randomly initialised decoder of each, so a new family is tested by
its entry in ``FAMILIES`` alone).
"""

from __future__ import annotations

from typing import Any, ClassVar, Optional

import torch
import torch.nn.functional as F

from ctxbench.core.errors import UserError


class UnsupportedModelError(UserError, ValueError):
    """The model's attention block cannot be decomposed by this code (say which family and why); a user error: the
    stages print it as one line."""


class FamilyAdapter:
    """Reads weights and recomputes queries/keys/values for one decoder family. Subclasses fill the hooks' targets."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_model: int

    # Attribute names inside one decoder layer: the attention block, and the module whose input is x_mid (the
    # residual right after the attention block).
    attn_name: str = "self_attn"
    mid_name: str = "post_attention_layernorm"
    # a norm between the attention output and the residual add (Gemma's sandwich norm): its input per row sets the
    # row's scale of the contributions (``row_scale``); None for pre-norm decoders
    post_attn_norm_name: Optional[str] = None

    def __init__(self, model, layers, dtype: torch.dtype = torch.float32):
        self.model = model
        self._layers = list(layers)
        self.n_layers = len(self._layers)
        self.dtype = dtype  # weights are read in this dtype (the capture's)
        self._out_blocks: dict = {}  # layer -> (n_heads, head_dim, d_model)
        self._out_rows: dict = {}  # layer -> (transposed blocks, their column norms)

    # --- structure -------------------------------------------------------------------------------------------------
    def layers(self) -> list:
        return self._layers

    def attn(self, li: int):
        return getattr(self._layers[li], self.attn_name)

    def mid_module(self, li: int):
        return getattr(self._layers[li], self.mid_name)

    def post_attn_norm(self, li: int):
        return getattr(self._layers[li], self.post_attn_norm_name) if self.post_attn_norm_name else None

    def row_scale(self, li: int, o: torch.Tensor) -> torch.Tensor:
        """(R,) factor of each sink row's contributions, from the attention outputs ``o`` (R, d) that enter
        ``post_attn_norm`` (only for families that have one)."""
        raise NotImplementedError

    # --- per-layer maths (inputs in self.dtype on the model's device) ----------------------------------------------
    @property
    def group(self) -> int:
        """Query heads per KV head (GQA): query head h reads KV head h // group (the order of transformers'
        repeat_kv)."""
        return self.n_heads // self.n_kv_heads

    def values(self, li: int, h: torch.Tensor) -> torch.Tensor:
        """(N, d) attention inputs -> (N, n_kv_heads, head_dim) values (one per KV head, not expanded)."""
        raise NotImplementedError

    def queries(self, li: int, h: torch.Tensor, positions: torch.Tensor, pos_emb) -> torch.Tensor:
        """(R, d) -> (R, n_heads, head_dim), position encoding applied."""
        raise NotImplementedError

    def keys(self, li: int, h: torch.Tensor, pos_emb) -> torch.Tensor:
        """(N, d) for positions 0..N-1 -> (N, n_kv_heads, head_dim), position encoding applied (not expanded)."""
        raise NotImplementedError

    def out_blocks(self, li: int) -> torch.Tensor:
        """(n_heads, head_dim, d_model): head h's slice of the output projection, so f_j^h = v_j^h @ W_O^h."""
        raise NotImplementedError

    def out_rows(self, li: int) -> tuple:
        """(W_O^h transposed (n_heads, d_model, head_dim), contiguous; the norms of W_O^h's columns (n_heads, d_model))
        for the overshoot bound of span IFR, made once per capture."""
        if li not in self._out_rows:
            rows = self.out_blocks(li).transpose(1, 2).contiguous()
            self._out_rows[li] = (rows, torch.linalg.vector_norm(rows, dim=-1))
        return self._out_rows[li]

    def _cached_out_blocks(self, li: int, make) -> torch.Tensor:
        # a contiguous copy per layer (the size of W_O), made once per capture rather than once per hop and layer
        if li not in self._out_blocks:
            self._out_blocks[li] = make().contiguous()
        return self._out_blocks[li]

    def out_bias(self, li: int) -> Optional[torch.Tensor]:
        raise NotImplementedError

    def scaling(self, li: int) -> float:
        return float(self.attn(li).scaling)

    def sliding_window(self, li: int) -> Optional[int]:
        return None

    # --- AttnLRP (ctxbench.attribution.lrp_rules) ------------------------------------------------------------------
    def lrp_plan(self, li: int) -> tuple[list, Any, Any]:
        """Layer ``li``'s modules for AttnLRP's rules: (linear module, uniform-rule share of its output) pairs, the
        MLP's activation module, and for a gated MLP the module whose input is the gate product (else None)."""
        raise UnsupportedModelError(f"{type(self).__name__}: AttnLRP's rules are not written for this family")

    label: ClassVar[str] = ""  # the family as the refusal of an unsupported model names it

    @classmethod
    def matches(cls, model) -> bool:
        """Whether ``model`` is of this family (``adapter_for`` asks each family in turn)."""
        return False

    @classmethod
    def tiny_configs(cls, vocab_size: int) -> dict[str, Any]:
        """``{member: transformers config}``: a 2-layer decoder of each model type the family reads, small enough
        for a unit test (``TINY`` sizes), with what sets the member apart switched on (biases, GQA, q/k norms, ...)."""
        return {}


# the sizes of a family's tiny test decoders (``FamilyAdapter.tiny_configs``)
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


def _w(t: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return t.detach().to(dtype)


def _linear(x: torch.Tensor, lin) -> torch.Tensor:
    return F.linear(x, _w(lin.weight, x.dtype), None if lin.bias is None else _w(lin.bias, x.dtype))


def capture_dtype(model) -> torch.dtype:
    """float64 for a float64 model (the accuracy reference), float32 for every other dtype."""
    return torch.float64 if next(model.parameters()).dtype == torch.float64 else torch.float32
