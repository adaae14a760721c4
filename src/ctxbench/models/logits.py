"""Logits at the positions that predict a generated continuation (teacher forcing), the shared first step of the
deletion passes, the ablation passes and the gradient baselines.

Ablated variants of one input agree with it up to their first changed position, and by causality so do every
layer's keys and values there: with the intact input's cache (``SharedPrefix``) a batch of variants is run only from
the first position where any of them differs. On SmolLM2 (sdpa, float32) the logits are bit-identical to the full
pass (tests/test_shared_prefix.py); a leave-one-sentence-out sweep saves about half of its work. (The deletion passes
of faithfulness gain nothing from it: nearly every deleted set holds a token near the start; docs/metrics.md.)

Scoring passes (faithfulness, perturbation, ContextCite) return ``Scored``: where the float32 logits of the scored
positions would pass ``LOGITS_BYTES`` (a 262,144-token vocabulary, Gemma 3's, makes 2,000 generated tokens in a batch
of 4 into 8 GiB of logits, twice that with the log-softmax's temporary), the pass keeps the final hidden states
instead and projects them onto the vocabulary a slice of positions at a time.
"""

from __future__ import annotations

import functools
import inspect
import logging
import weakref
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

import numpy as np
import torch

from ctxbench.utils import progress

log = logging.getLogger(__name__)

# The most float32 logits a scoring pass holds at once; above it, a slice of positions at a time (``Scored``).
LOGITS_BYTES = 512 * 2 ** 20


def _accepts(model, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def predicting_logits(model, gen_start: int, *, input_ids: torch.Tensor = None,
                      inputs_embeds: torch.Tensor = None) -> torch.Tensor:
    """float32 logits (B, G, V) at positions gen_start - 1 .. T - 2, those that predict tokens gen_start .. T - 1, of
    a batch given as ``input_ids`` (B, T) or ``inputs_embeds`` (B, T, d).

    The last token predicts nothing scored, so it is not fed; ``logits_to_keep`` (where the model takes it) skips the
    vocabulary projection over the prompt, forward and backward (SmolLM2: a 576 x 49,152 product per position, about
    a fifth of the model's multiply-adds)."""
    x = input_ids if input_ids is not None else inputs_embeds
    kw = {"input_ids": x[:, :-1]} if input_ids is not None else {"inputs_embeds": x[:, :-1]}
    g = x.shape[1] - gen_start
    return _last(_scoring_pass(model, g, **_without_cache(model, kw)), g)


def _without_cache(model, kw: dict) -> dict:
    if _accepts(model, "use_cache"):  # no key/value cache to build for a single pass
        kw["use_cache"] = False
    return kw


def _scoring_pass(model, g: int, **kw):
    """The model's output on ``kw``, the vocabulary projection only at the last g positions where the model takes
    ``logits_to_keep``."""
    if _accepts(model, "logits_to_keep"):
        kw["logits_to_keep"] = g
    return model(**kw)


def _last(out, g: int) -> torch.Tensor:
    return out.logits[:, -g:, :].float()  # float32: fp16/bf16 underflow small probabilities


def positions_per_slice(batch: int, vocab: int) -> int:
    """How many scored positions of a batch one slice projects onto the vocabulary within ``LOGITS_BYTES``."""
    return max(1, LOGITS_BYTES // (batch * vocab * 4))


class VocabHead:
    """A causal LM's last step from final hidden states to logits, as its forward takes it: the output embeddings,
    then, where the config sets ``final_logit_softcapping`` (Gemma 2 and 3), ``cap * tanh(logits / cap)``; float32.
    ``Scored`` checks it against the model's own logits at one position of every pass it serves."""

    def __init__(self, module: torch.nn.Module, cap: Optional[float]):
        self.module, self.cap = module, cap

    @classmethod
    def of(cls, model) -> Optional["VocabHead"]:
        get = getattr(model, "get_output_embeddings", None)
        module = get() if get is not None else None
        if module is None or getattr(module, "weight", None) is None:
            return None
        cfg = model.config
        text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        cap = getattr(cfg, "final_logit_softcapping", None) or getattr(text, "final_logit_softcapping", None)
        return cls(module, cap)

    @property
    def vocab(self) -> int:
        return int(self.module.weight.shape[0])

    @torch.no_grad()  # scoring only; and a slice may be taken after the pass's inference mode has ended
    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.module(hidden)
        if self.cap:
            logits = torch.tanh(logits / self.cap) * self.cap
        return logits.float()


@dataclass(frozen=True)
class Scored:
    """The scored positions of a pass (B, g): its float32 ``logits`` (B, g, V), or, where those would pass
    ``LOGITS_BYTES``, the final ``hidden`` states (B, g, d) and the model's ``head``, projected a slice of positions
    at a time."""

    logits: Optional[torch.Tensor] = None
    hidden: Optional[torch.Tensor] = None
    head: Optional[VocabHead] = None

    @property
    def rows(self) -> int:
        return (self.logits if self.logits is not None else self.hidden).shape[0]

    @property
    def positions(self) -> int:
        return (self.logits if self.logits is not None else self.hidden).shape[1]

    @property
    def vocab(self) -> int:
        return self.logits.shape[-1] if self.logits is not None else self.head.vocab

    def log_softmax(self, step: Optional[int] = None) -> Iterator[tuple[slice, torch.Tensor]]:
        """(positions, log-probabilities (B, n, V)) over the scored positions, ``step`` at a time (None: all at once
        where the logits were kept, else the slice ``LOGITS_BYTES`` allows)."""
        if step is None:
            step = self.positions if self.logits is not None else positions_per_slice(self.rows, self.vocab)
        for a in range(0, self.positions, step):
            sl = slice(a, a + step)
            logits = self.logits[:, sl] if self.logits is not None else self.head(self.hidden[:, sl])
            yield sl, torch.log_softmax(logits, dim=-1)

    def target_logprobs(self, targets: torch.Tensor) -> torch.Tensor:
        """log p(target) at every scored position, (B, g) float32; ``targets`` (g,) or (B, g)."""
        targets = targets.expand(self.rows, -1) if targets.dim() == 1 else targets
        return torch.cat([lp.gather(-1, targets[:, sl, None])[..., 0] for sl, lp in self.log_softmax()], dim=1)


# Models whose head ``VocabHead`` did not reproduce (a scaling it does not know): their passes keep the logits.
_UNREPRODUCED: "weakref.WeakSet" = weakref.WeakSet()


def _scored_pass(model, g: int, **kw) -> tuple[Scored, object]:
    """``_scoring_pass`` as ``Scored``, and the model's output (for its key/value cache)."""
    head = VocabHead.of(model)
    batch = (kw["input_ids"] if "input_ids" in kw else kw["inputs_embeds"]).shape[0]
    if head is None or model in _UNREPRODUCED or batch * g * head.vocab * 4 <= LOGITS_BYTES:
        out = _scoring_pass(model, g, **kw)
        return Scored(logits=_last(out, g)), out
    kept = {}

    def last_position_only(module, args):  # the model's head then projects one position, kept to check ours
        kept["hidden"] = args[0]
        return (args[0][:, -1:],) + tuple(args[1:])

    handle = head.module.register_forward_pre_hook(last_position_only)
    try:
        out = _scoring_pass(model, g, **kw)
    finally:
        handle.remove()
    hidden = kept["hidden"][:, -g:]
    if torch.allclose(head(hidden[:, -1:]), _last(out, 1), rtol=1e-4, atol=1e-4):
        return Scored(hidden=hidden, head=head), out
    log.warning("%s: the vocabulary projection is not the output embeddings (and soft-capping) alone; its scoring "
                "passes keep every scored position's logits", type(model).__name__)
    _UNREPRODUCED.add(model)
    return _scored_pass(model, g, **kw)


def _cache_kwarg(model) -> Optional[str]:
    """The forward's name for a key/value cache (``cache`` since transformers 5.x, ``past_key_values`` before), or
    None for a model that takes none."""
    return next((n for n in ("cache", "past_key_values") if _accepts(model, n)), None)


@dataclass(frozen=True)
class SharedPrefix:
    """Every layer's keys and values of an intact input over the positions a scoring pass feeds (0 .. T - 2)."""

    ids: torch.Tensor  # (T,) the intact input
    layers: tuple  # ((keys, values), ...) per layer, each (1, kv_heads, T - 1, head_dim)
    kwarg: str  # the forward's name for the cache

    def start(self, input_ids: torch.Tensor, gen_start: int) -> int:
        """Where a batch (B, T) of variants must start: their first position differing from the intact input, at most
        gen_start - 1 (the first position whose logits are scored)."""
        differs = (input_ids[:, :-1] != self.ids[None, :-1]).any(0).nonzero()
        first = int(differs[0]) if differs.numel() else input_ids.shape[1] - 1
        return min(first, gen_start - 1)

    def cache(self, upto: int):
        """A cache of positions 0 .. upto - 1 for a batch of any size, kept once (batch 1): each layer returns them
        expanded to the batch and joined to the new positions, keeping nothing (memory: one layer's keys and values
        for the batch at a time, not every layer's)."""
        from transformers.cache_utils import Cache

        layer = _prefix_layer_class()
        return Cache(layers=[layer(k[:, :, :upto], v[:, :, :upto]) for k, v in self.layers])


@functools.lru_cache(maxsize=None)
def _prefix_layer_class():
    """The layer class of ``SharedPrefix.cache``, made on first use (transformers is imported lazily)."""
    from transformers.cache_utils import DynamicLayer

    class PrefixLayer(DynamicLayer):
        """A read-only layer of ``SharedPrefix.cache``; its length (the mask's offset) is the prefix's."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor):
            super().__init__()
            self.keys, self.values, self.device, self.is_initialized = keys, values, keys.device, True

        def update(self, key_states, value_states, *args, **kwargs):
            b = key_states.shape[0]
            return (torch.cat([self.keys.expand(b, -1, -1, -1), key_states], dim=-2),
                    torch.cat([self.values.expand(b, -1, -1, -1), value_states], dim=-2))

    return PrefixLayer


def scored(model, g: int, **kw) -> Scored:
    """The last g positions of one pass of ``model`` on ``kw`` (without building a key/value cache)."""
    return _scored_pass(model, g, **_without_cache(model, kw))[0]


def predicting_scores(model, gen_start: int, input_ids: torch.Tensor) -> Scored:
    """``predicting_logits`` of a batch (B, T) as ``Scored``."""
    return scored(model, input_ids.shape[1] - gen_start, input_ids=input_ids[:, :-1])


def intact_scores(model, gen_start: int, ids: torch.Tensor) -> tuple[Scored, Optional[SharedPrefix]]:
    """``predicting_scores`` of one input (T,), with its ``SharedPrefix`` from the same pass (None when the model
    takes no cache or returns none in the expected layout)."""
    ids = ids.reshape(-1)
    name = _cache_kwarg(model)
    if name is None or not _accepts(model, "use_cache"):
        return predicting_scores(model, gen_start, ids[None]), None
    g = ids.shape[0] - gen_start
    result, out = _scored_pass(model, g, input_ids=ids[None, :-1], use_cache=True)
    cache = getattr(out, "cache", None)
    cache = getattr(out, "past_key_values", None) if cache is None else cache
    layers = getattr(cache, "layers", None)
    ok = layers and all(getattr(lay, "keys", None) is not None and lay.keys.shape[-2] == ids.shape[0] - 1
                        for lay in layers)
    prefix = SharedPrefix(ids, tuple((lay.keys, lay.values) for lay in layers), name) if ok else None
    return result, prefix


def variant_scores(model, gen_start: int, input_ids: torch.Tensor, prefix: Optional[SharedPrefix]) -> Scored:
    """``predicting_scores`` of a batch (B, T) of variants of ``prefix.ids``, run from their first difference on
    (the whole pass without a prefix or when they differ at position 0)."""
    m = prefix.start(input_ids, gen_start) if prefix is not None else 0
    if m == 0:
        return predicting_scores(model, gen_start, input_ids)
    g = input_ids.shape[1] - gen_start
    return _scored_pass(model, g, input_ids=input_ids[:, m:-1], use_cache=True, **{prefix.kwarg: prefix.cache(m)})[0]


PADDING_SIDES = ("left", "right")


def mean_query_logprobs(model, rows: Sequence[tuple[Sequence[int], Sequence[int]]], *, pad_id: int,
                        batch_size: int, padding_side: str = "left", what: str = "rerank") -> np.ndarray:
    """For each ``(context ids, query ids)`` row, the mean log-probability of the query ids given the context and the
    earlier query ids, float64; rows run ``batch_size`` at a time, longest first, their progress shown as ``what``
    (the query-likelihood reranker's pairs, MDL's labels)."""
    if padding_side not in PADDING_SIDES:
        raise ValueError(f"padding_side={padding_side!r}: expected left or right")
    out = np.empty(len(rows), dtype=np.float64)
    order = np.argsort([-(len(c) + len(q)) for c, q in rows], kind="stable")
    device = next(model.parameters()).device
    with torch.inference_mode(), progress.bar(len(order), what, "row") as bar:
        for start in range(0, len(order), batch_size):
            sel = order[start:start + batch_size]
            bar.update(len(sel))
            ctx = [list(rows[i][0]) for i in sel]
            qry = [list(rows[i][1]) for i in sel]
            lens = [len(c) + len(q) for c, q in zip(ctx, qry)]
            width = max(lens)
            ids = torch.full((len(sel), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(sel), width), dtype=torch.long)
            # first[r]: the column whose logits predict row r's first query token
            if padding_side == "left":
                for r, (c, q) in enumerate(zip(ctx, qry)):
                    ids[r, width - lens[r]:] = torch.tensor(c + q)
                    mask[r, width - lens[r]:] = 1
                extra = {"position_ids": (mask.cumsum(-1) - 1).clamp(min=0).to(device)}
                first = [width - len(q) - 1 for q in qry]
            else:
                for r, (c, q) in enumerate(zip(ctx, qry)):
                    ids[r, :lens[r]] = torch.tensor(c + q)
                    mask[r, :lens[r]] = 1
                extra = {}
                first = [len(c) - 1 for c in ctx]
            keep = width - min(first)  # the LM head runs on the last `keep` columns only
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), logits_to_keep=keep,
                           **extra).logits
            logp = torch.log_softmax(logits.float(), dim=-1)
            offset = width - keep
            for r, (i, q) in enumerate(zip(sel, qry)):
                cols = torch.arange(first[r], first[r] + len(q), device=device) - offset
                picked = logp[r, cols, torch.tensor(q, device=device)]
                out[i] = picked.double().mean().item()
    return out
