"""Sentence-level feature ablation (docs/attribution.md, "Perturbation"), and the sentence units and batched ablation
passes it shares with ContextCite.

A *unit* is a sentence of the prompt tokens or of the generated tokens (the EOS on its own); ablating a unit replaces
its tokens by the pad id (the EOS id, as the faithfulness deletions do). One teacher-forced pass of an ablated input
gives the log-probability of every generated token at once, so a unit costs one pass for all generated sentences.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass
from typing import ClassVar, Optional, Sequence

import numpy as np
import torch

from ctxbench.attribution.base import AttributionResult, Attributor
from ctxbench.attribution.memory import ablation_passes
from ctxbench.utils.batching import run_in_batches
from ctxbench.datasets.sentences import split_sentences
from ctxbench.models.attention import attention_kernel
from ctxbench.models.endpoint_lm import is_endpoint
from ctxbench.models.logits import (Scored, intact_scores, positions_per_slice, predicting_scores,
                                     variant_scores)
from ctxbench.core.part import neutral, param
from ctxbench.utils.tokens import eos_id, eos_ids

OBJECTIVES = ("logprob", "kl")
SPREADS = ("copy", "share")


# --- sentence units ---------------------------------------------------------------------------------------------

def token_sentences(tokenizer, ids: Sequence[int]) -> list[np.ndarray]:
    """Split consecutive tokens into sentences: indices into ``ids``, in order, covering every token once.

    The tokens are decoded one by one (each after its predecessor, so SentencePiece's word-initial spaces survive),
    the text is split by ``split_sentences``, and a token belongs to the sentence in which its first non-blank
    character lies; blank tokens stay with the sentence before them.
    """
    ids = [int(i) for i in ids]
    if not ids:
        return []
    pieces, starts, pos = [], [], 0
    for k, i in enumerate(ids):
        if k == 0:
            piece = tokenizer.decode([i])
        else:
            prev = tokenizer.decode([ids[k - 1]])
            piece = tokenizer.decode([ids[k - 1], i])[len(prev):]
        lead = len(piece) - len(piece.lstrip())
        starts.append(pos + (lead if piece.strip() else 0))
        pieces.append(piece)
        pos += len(piece)
    sent_starts = [a for a, _ in split_sentences("".join(pieces))]
    owner = np.array([max(0, bisect.bisect_right(sent_starts, s) - 1) for s in starts])
    return [np.flatnonzero(owner == u) for u in np.unique(owner)]


@dataclass(frozen=True)
class SentenceUnits:
    """``prompt[u]``: prompt-token indices (0..P-1) of prompt sentence u; ``generated[g]``: generated-token indices
    (0..G-1) of generated sentence g, a final EOS token being a sentence of its own."""

    prompt: list[np.ndarray]
    generated: list[np.ndarray]

    @classmethod
    def of(cls, tokenizer, ctx) -> "SentenceUnits":
        ids = ctx.input_ids.detach().cpu()
        gen = ids[ctx.gen_start:].tolist()
        ends_in_eos = gen[-1] in eos_ids(tokenizer)
        body = gen[:-1] if ends_in_eos else gen
        generated = token_sentences(tokenizer, body)
        if ends_in_eos:
            generated.append(np.array([len(gen) - 1]))
        return cls(prompt=token_sentences(tokenizer, ids[ctx.prompt_positions.cpu()].tolist()), generated=generated)

    def prompt_positions(self, ctx, u: int) -> torch.Tensor:
        return ctx.prompt_positions[torch.as_tensor(self.prompt[u], device=ctx.prompt_positions.device)]

    def generated_positions(self, ctx, g: int) -> torch.Tensor:
        return ctx.gen_start + torch.as_tensor(self.generated[g], device=ctx.input_ids.device)


# --- batched ablation passes ------------------------------------------------------------------------------------

@torch.inference_mode()
def ablated_token_scores(model, input_ids: torch.Tensor, gen_start: int, ablations: Sequence[torch.Tensor],
                         pad_id: int, batch_size: int, objective: str = "logprob",
                         attn_implementation: Optional[str] = "sdpa",
                         share_prefix: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Score every generated token under each ablation (a tensor of absolute positions set to ``pad_id``).

    Returns ``(reference, scores)``, float64: ``reference`` (G,) is log p(y_t) of the intact input and ``scores``
    (N, G) is, per ablation, log p(y_t) (``objective="logprob"``) or KL(p_intact || p_ablated) of the next-token
    distributions at the position predicting y_t (``"kl"``). ``batch_size`` ablated inputs share a forward pass
    (fewer after a CUDA out-of-memory error).
    The ablations run in the order of their first position, and with ``share_prefix`` each batch from the first
    position it changes on, the positions before it taken from the intact pass's cache (``SharedPrefix``).
    """
    ids = input_ids.reshape(-1)
    targets = ids[gen_start:]
    if is_endpoint(model):  # the server runs the passes (models.endpoint_lm): log-probabilities only
        if objective != "logprob":
            raise ValueError(f"objective={objective!r}: a served model gives log-probabilities only (logprob)")
        seqs = [ids.clone() for _ in ablations]
        for seq, gone in zip(seqs, ablations):
            seq[gone] = pad_id
        got = model.target_logprobs([ids.tolist()] + [s.tolist() for s in seqs], targets.numel())
        return got[0], got[1:]
    out = np.empty((len(ablations), targets.numel()), dtype=np.float64)
    first = [int(a.min()) if a.numel() else ids.numel() for a in ablations]
    order = sorted(range(len(ablations)), key=first.__getitem__)
    with attention_kernel(model, attn_implementation):
        intact, prefix = intact_scores(model, gen_start, ids) if share_prefix else \
            (predicting_scores(model, gen_start, ids[None]), None)
        reference = intact.target_logprobs(targets)[0].double().cpu().numpy()

        def score(lo: int, hi: int) -> None:
            chunk = order[lo:hi]
            seqs = ids.repeat(len(chunk), 1)
            for row, i in enumerate(chunk):
                seqs[row, ablations[i]] = pad_id
            ablated = variant_scores(model, gen_start, seqs, prefix)
            if objective == "kl":
                val = kl_divergence(intact, ablated)
            else:
                val = ablated.target_logprobs(targets)
            out[chunk] = val.double().cpu().numpy()

        # a long input on a small GPU: the batch halves on out-of-memory, as the deletion passes' do
        run_in_batches(len(order), batch_size, score, what="ablation passes", unit="seq")
    return reference, out


def kl_divergence(intact: Scored, ablated: Scored) -> torch.Tensor:
    """KL(p_intact || p_ablated) of the next-token distributions at every scored position, (B, G): the slices of
    the ablated batch's positions, the intact input's same positions beside each."""
    step = positions_per_slice(ablated.rows, ablated.vocab)
    pairs = zip(ablated.log_softmax(step), intact.log_softmax(step))
    return torch.cat([(ref.exp() * (ref - logp)).sum(-1) for (_, logp), (_, ref) in pairs], dim=1)


def spread_onto_tokens(score: np.ndarray, cols: np.ndarray, how: str) -> np.ndarray:
    """A unit's score on each of its tokens: the same value (``copy``) or an equal share of it (``share``)."""
    return score if how == "copy" else score / len(cols)


# --- the method -------------------------------------------------------------------------------------------------

@dataclass
class PerturbationAttributor(Attributor):
    """Leave-one-sentence-out over the prompt's and the generation's sentences.

    Row t (generated token t, in generated sentence g) gets, on the tokens of every prompt sentence and of every
    generated sentence before g, the drop of log p(y_t) when that sentence is replaced by the pad id
    (``objective="logprob"``), or the KL divergence of the next-token distribution it causes (``"kl"``). ``spread``:
    each token of the source sentence carries the whole score (``copy``, as FlashTrace's code) or an equal share
    (``share``).
    ``batch_size`` ablated inputs per forward pass; ``forward_attn_impl`` the attention kernel of those passes.
    """
    log_probs_only: ClassVar[bool] = True

    name: ClassVar[str] = "perturbation"
    objective: str = param("logprob", choices=OBJECTIVES)
    spread: str = param("copy", choices=SPREADS)
    batch_size: int = neutral(4, ge=1)
    forward_attn_impl: Optional[str] = "sdpa"

    def memory_need(self, shape, T, G):
        return ablation_passes(shape, T, G, int(self.batch_size), kl=self.objective == "kl",
                               impl=self.forward_attn_impl)

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        t0 = time.perf_counter()
        units = SentenceUnits.of(tokenizer, ctx)
        # Sources: every prompt sentence, then every generated sentence that has a later one to explain.
        sources = [(units.prompt_positions(ctx, u), units.prompt[u], 0) for u in range(len(units.prompt))]
        sources += [(units.generated_positions(ctx, g), ctx.P + units.generated[g], g + 1)
                    for g in range(len(units.generated) - 1)]
        reference, scores = ablated_token_scores(model, ctx.input_ids, ctx.gen_start, [s[0] for s in sources],
                                                 eos_id(tokenizer), self.batch_size, self.objective,
                                                 self.forward_attn_impl)
        if self.objective == "logprob":
            scores = reference[None, :] - scores
        A = np.zeros((ctx.G, ctx.P + ctx.G), dtype=np.float32)
        for (_, cols, first), row_scores in zip(sources, scores):
            rows = np.concatenate(units.generated[first:])
            A[np.ix_(rows, cols)] = spread_onto_tokens(row_scores[rows], cols, self.spread)[:, None]
        timings["attribution"] = time.perf_counter() - t0
        return AttributionResult(matrix=A, method=self.name, P=ctx.P, G=ctx.G, rows_written=np.arange(ctx.G),
                                 info={"prompt_sentences": len(units.prompt),
                                       "generated_sentences": len(units.generated), "ablations": len(sources)})
