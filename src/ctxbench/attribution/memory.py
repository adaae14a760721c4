"""How much memory a method (or a scorer) will add over the loaded model on one input, estimated from the model's
shape before any work, so that a run that cannot fit is refused up front with the estimate instead of failing after
minutes (``check_fits``, called by the run stage before the first example).

The estimates count the tensors that dominate, term by term (docs/benchmarks.md, "The up-front estimates against
measured peaks", has the measured peaks they are checked against): what IFR's capture keeps per layer
(``ifr_capture``), what autograd saves for a backward pass through every layer (``saved_for_backward``), the
attention rows the attention baseline keeps (``attention_rows``), the transient activations of a batched forward pass
without its logits (``forward_transient``) and the logits of the positions scored (``scored_logits``: a 262k-token
vocabulary makes these the largest term of a scoring pass). They are estimates: ``tests/test_memory.py`` holds them
at 1-3x the peak of the live tensors measured on the real models, which leaves the C allocator's slack room.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

import torch

from ctxbench.utils.cgroup import memory_headroom
from ctxbench.core.errors import ConfigError
from ctxbench.models.logits import positions_per_slice

GIB = 2 ** 30
# What any pass of the model adds whatever the length: kernel and allocator workspaces, the per-layer weight blocks a
# method keeps in float32 (measured: 100-200 MiB on SmolLM2 and Gemma 3 at 800 tokens, where the length terms are small)
WORKSPACE = 128 * 2 ** 20


@dataclass(frozen=True)
class ModelShape:
    """The sizes that decide memory: layers, model width ``d``, attention heads and key/value heads of ``head_dim``,
    the MLP's ``intermediate`` width, the vocabulary, the bytes of one activation (4 for float32), the number of
    distinct rotary tables (Gemma 3's local and global layers use two bases; 0 without RoPE), and of the T x T boolean
    attention masks a forward pass builds: one per attention type where sliding-window layers need their own (Gemma
    3: 2, about 1 GiB each at 32k tokens), 0 where the kernel takes a plain causal flag (Llama without padding);
    ``eager``: the model was loaded with eager attention (run_exp loads it so), which a pass keeping the loaded
    kernel runs."""

    layers: int
    d: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    elem: int = 4
    rope_tables: int = 1
    masks: int = 0
    eager: bool = False

    @classmethod
    def of(cls, model) -> "ModelShape":
        """Read from a transformers model's (text) config; GPT-2's names (n_layer, n_embd, n_head, n_inner) too."""
        c = model.config
        c = c.get_text_config() if hasattr(c, "get_text_config") else c

        def first(*names, default=None):
            return next((getattr(c, n) for n in names if getattr(c, n, None) is not None), default)

        d = int(first("hidden_size", "n_embd"))
        heads = int(first("num_attention_heads", "n_head"))
        # rope_parameters: one table, or one per layer type (Gemma 3: sliding and full attention)
        rope_params = first("rope_parameters", "rope_scaling")
        if isinstance(rope_params, dict) and rope_params and all(isinstance(v, dict) for v in rope_params.values()):
            rope = len(rope_params)
        else:
            rope = int(rope_params is not None or first("rope_theta") is not None)
        types = set(first("layer_types", default=()) or ())
        sliding = any("sliding" in t for t in types) if types else first("sliding_window") is not None
        masks = max(len(types), 1) if sliding else 0
        dtype = next(model.parameters()).dtype
        return cls(layers=int(first("num_hidden_layers", "n_layer")), d=d, heads=heads,
                   kv_heads=int(first("num_key_value_heads", default=heads)),
                   head_dim=int(first("head_dim", default=d // heads)),
                   intermediate=int(first("intermediate_size", "n_inner", default=4 * d)),
                   vocab=int(first("vocab_size")),
                   elem=max(4, torch.tensor([], dtype=dtype).element_size()), rope_tables=rope, masks=masks,
                   eager=getattr(model.config, "_attn_implementation", None) == "eager")

    @property
    def kv_width(self) -> int:
        """Floats of one position's keys and values in one layer."""
        return 2 * self.kv_heads * self.head_dim


@dataclass(frozen=True)
class Need:
    """An estimate: ``bytes`` added over the loaded model, and ``what`` takes most of it (said in the refusal)."""

    bytes: int
    what: str

    def __add__(self, other: "Need") -> "Need":
        return Need(self.bytes + other.bytes, self.what)


# --- the terms --------------------------------------------------------------------------------------------------------

def forward_transient(s: ModelShape, T: int, batch: int = 1, padded: bool = False) -> int:
    """One layer's working tensors of a forward pass without gradients (the MLP's gate, up and product, the residual
    and its norm; layers run one after the other, so one layer's worth is alive at a time) and the pass's attention
    masks: one per attention type shared by the batch (transformers broadcasts a mask that does not depend on the
    row), one per row and type for ``padded`` batches, on every family."""
    masks = batch * max(s.masks, 1) if padded else s.masks
    return WORKSPACE + batch * T * (3 * s.intermediate + 3 * s.d) * s.elem + masks * T * T


def scored_logits(s: ModelShape, G: int, batch: int = 1, copies: int = 2) -> int:
    """The float32 logits of the G scored positions and the log-softmax's temporary of the same size (``copies``
    3 with their gradient)."""
    return copies * batch * G * s.vocab * 4


def eager_attention(s: ModelShape, T: int, impl, batch: int = 1, kept: bool = False) -> int:
    """The T x T attention matrices of a pass that keeps the loaded kernel (``impl`` None) on a model loaded with
    eager attention: one layer's scores, masked scores and probabilities at a time, or every layer's probabilities
    and scores when a backward pass keeps them (``kept``); nothing with a fused kernel (sdpa: no T x T matrix)."""
    if impl is not None or not s.eager:
        return 0
    return batch * (2 * s.layers if kept else 3) * s.heads * T * T * 4


def saved_for_backward(s: ModelShape, T: int, batch: int = 1) -> int:
    """What autograd keeps of every layer for one backward pass (sdpa attention: no T x T matrix): the norms' inputs
    and outputs, queries, keys and values before and after RoPE, the attention output, the MLP's gate, up, activation
    and product, per position."""
    per_position = 8 * s.d + 3 * s.heads * s.head_dim + 2 * s.kv_width + 5 * s.intermediate
    return WORKSPACE + batch * T * s.layers * per_position * s.elem


def ifr_capture(s: ModelShape, T: int, rows: int) -> int:
    """IFR's capture (ctxbench.attribution.capture): keys and values of every position and layer, the rotary tables,
    and for the ``rows`` that can be sinks the residual streams before and after attention and their queries."""
    return (T * s.layers * s.kv_width + s.rope_tables * T * 2 * s.head_dim
            + rows * s.layers * (2 * s.d + s.heads * s.head_dim)) * s.elem


def attention_rows(s: ModelShape, T: int, rows: int) -> int:
    """Attention probabilities of ``rows`` query positions over T sources, every head of every layer (float32)."""
    return rows * T * s.heads * s.layers * 4


def scoring_passes(s: ModelShape, T: int, G: int, batch: int, padded: bool = False) -> int:
    """Forward passes of ``batch`` variants of the input whose G generated tokens are scored, their logits a slice
    of positions at a time where all would pass ``LOGITS_BYTES`` (ctxbench.models.logits.Scored)."""
    sliced = min(G, positions_per_slice(batch, s.vocab))
    return forward_transient(s, T, batch, padded) + scored_logits(s, sliced, batch)


def ablation_passes(s: ModelShape, T: int, G: int, batch: int, kl: bool = False, padded: bool = False,
                    impl: Optional[str] = "sdpa") -> Need:
    """Batched ablation passes (perturbation, ContextCite): the intact input's keys and values shared by every batch
    (``SharedPrefix``), each batch's own for the layer under way, its working tensors and scored logits; with the KL
    objective the intact input's next-token distributions too (a slice at a time, as the scored logits);
    ``padded``: the ablated inputs have other lengths (ContextCite's deletions), so the batch is padded and its
    masks are per row."""
    need = (T * s.layers * s.kv_width * s.elem + batch * T * s.kv_width * s.elem
            + scoring_passes(s, T, G, batch, padded) + eager_attention(s, T, impl, batch)
            + (scored_logits(s, min(G, positions_per_slice(1, s.vocab))) if kl else 0) + 2 * result_matrix(T, G))
    return Need(need, f"{batch} ablated inputs per pass and their logits over {s.vocab:,} tokens")


def result_matrix(T: int, G: int) -> int:
    """The method's float32 G x (P + G) matrix."""
    return G * T * 4


# --- the check --------------------------------------------------------------------------------------------------------

def free_bytes(device) -> tuple[int, str]:  # (bytes, what they are: said in the refusal)
    """Memory free for a run on ``device``: a GPU's free memory (torch.cuda.mem_get_info), else the host's available
    memory (psutil: free plus reclaimable caches), or the headroom of this process's cgroup where that is less (a
    container's limit: ctxbench.utils.cgroup)."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0]), f"memory free on {device}"
    import psutil

    host = int(psutil.virtual_memory().available)
    group = memory_headroom()
    if group is not None and group < host:
        return group, "memory this process's cgroup (container) limit leaves"
    return host, "memory available on the host"


def gib(n: int) -> str:
    return f"{n / GIB:,.1f} GiB"


def check_fits(needs: Iterable[tuple[str, Optional[Need]]], T: int, G: int, free: int, where: str) -> None:
    """Refuse, in one line naming every part that cannot fit, when a part's estimate for the longest input (T tokens,
    G generated) is above the ``free`` memory; parts without an estimate (None) pass."""
    over = [(name, need) for name, need in needs if need is not None and need.bytes > free]
    if not over:
        return
    parts = "; ".join(f"{name} about {gib(need.bytes)} ({need.what})" for name, need in over)
    raise ConfigError(f"{parts} for an input of {T:,} tokens ({G:,} generated), more than the {gib(free)} of "
                      f"{where} (estimates: docs/benchmarks.md); run on shorter inputs or with more memory, or set "
                      f"memory_check=false to try anyway")
