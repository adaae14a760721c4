"""Model-free controls (docs/metrics.md, "Controls"): what a method that reads no model gets on the same examples.

A table that compares attribution methods must show what a trivial method scores on the same metric: on RULER
targets that repeat the prompt, "find where the target was copied from" already recovers most evidence tokens.

- ``copy_match``: prompt token p scores the length of the longest run of consecutive target tokens (anywhere in the
  generation, its chain of thought included) that also occurs in the prompt at a place covering p, the same in
  every row: the text alone says where the target was copied from, whatever token is explained. Ties are broken by
  p's token idf over the prompt (``ln(P / n)`` for a token occurring n times among the P prompt tokens), added as a
  fraction below 1 so it never outweighs a longer run.
- ``position``: a recency prior: prompt token p scores ``(p + 1) / P`` in every row.
- ``length``: a length prior: prompt token p scores the token count of the prompt sentence it lies in, in every row;
  a source (sentence) of the source-level metrics (LDS, top-k drop) scores its token count. A method's source score is
  the sum of its token scores over the sentence (``AttributionResult.source_scores`` None), which by itself favours
  long sentences: this row shows what that prior alone gets.
- ``random`` (``baselines.RandomAttributor``): uniform scores, one draw per token, and one per source, in [-1, 1),
  for LDS and top-k drop (so that chance carries no length prior).

They need the token ids only (``length`` the tokenizer too, to split the prompt into sentences as the sources are
split), so a run of controls with model-free scorers (recovery) loads no model weights. Their generated-token columns
are 0 (they attribute to the prompt only); rows the caller does not read are NaN as for every per-token method.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, ClassVar, Optional

import numpy as np

from ctxbench.attribution.base import AttributionResult, Attributor, empty_matrix
from ctxbench.attribution.memory import Need, result_matrix
from ctxbench.attribution.perturbation import SentenceUnits

CONTROL_METHODS = ("copy_match", "position", "length", "random")  # the methods a report treats as controls


@dataclass
class _Control(Attributor):
    log_probs_only: ClassVar[bool] = True
    needs_model: ClassVar[bool] = False

    def memory_need(self, shape, T, G):
        # the result matrix and, for copy_match, three G x P integer/bool tables (equal, run ends, run lengths)
        return Need(2 * result_matrix(T, G) + 3 * G * T * 8, "the result matrix and the token-match tables")

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        t0 = time.perf_counter()
        ids = ctx.input_ids.detach().cpu().numpy().astype(np.int64)
        prompt = ids[ctx.prompt_positions.cpu().numpy()]
        rows = ctx.row_indices()
        A = empty_matrix(ctx.G, ctx.P)
        A[rows] = 0.0
        A[rows, :ctx.P] = self._scores(tokenizer, ctx, prompt, ids[ctx.gen_start:])[rows]
        timings["attribution"] = time.perf_counter() - t0
        return AttributionResult(matrix=A, method=self.name, P=ctx.P, G=ctx.G, rows_written=rows,
                                 source_scores=self._source_rule())

    def _scores(self, tokenizer, ctx, prompt: np.ndarray, target: np.ndarray) -> np.ndarray:
        """(G, P) scores of the prompt tokens for each generated token (``_prompt_scores``: from the ids alone)."""
        return self._prompt_scores(prompt, target)

    def _prompt_scores(self, prompt: np.ndarray, target: np.ndarray) -> np.ndarray:
        """(G, P) from the prompt's and the generation's ids (copy_match, position)."""
        raise NotImplementedError

    def _source_rule(self) -> Optional[Callable[[list[np.ndarray]], np.ndarray]]:
        """How the source-level metrics score a source (``AttributionResult.source_scores``); None: the sum of the
        token scores over its tokens."""
        return None


def copy_run_lengths(prompt, target) -> np.ndarray:
    """(G, P) int: for target token t and prompt token p, the length of the longest maximal common run
    ``target[i:i+L] == prompt[j:j+L]`` with ``i <= t < i+L`` and ``j <= p < j+L`` (0 when none)."""
    a = np.asarray(prompt, dtype=np.int64).reshape(-1)
    b = np.asarray(target, dtype=np.int64).reshape(-1)
    G, P = b.size, a.size
    out = np.zeros((G, P), dtype=np.int64)
    if G == 0 or P == 0:
        return out
    eq = b[:, None] == a[None, :]
    # ending[t, p]: the length of the common run ending at (t, p), row by row along the diagonals
    ending = np.zeros((G, P), dtype=np.int64)
    ending[0] = eq[0]
    for t in range(1, G):
        ending[t, 1:] = np.where(eq[t, 1:], ending[t - 1, :-1] + 1, 0)
        ending[t, 0] = eq[t, 0]
    # a run is maximal where it cannot go on to (t+1, p+1)
    goes_on = np.zeros((G, P), dtype=bool)
    goes_on[:-1, :-1] = eq[1:, 1:]
    ends = eq & ~goes_on
    single = ends & (ending == 1)
    out[single] = 1  # most runs are one token long: their block is the cell itself
    for t, p in zip(*np.nonzero(ends & (ending > 1))):
        n = ending[t, p]
        block = out[t - n + 1:t + 1, p - n + 1:p + 1]
        np.maximum(block, n, out=block)
    return out


def prompt_idf(prompt) -> np.ndarray:
    """(P,) ``ln(P / n)`` for each prompt token, n its id's count among the P prompt tokens."""
    a = np.asarray(prompt, dtype=np.int64).reshape(-1)
    _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    return np.log(a.size / counts[inverse.reshape(-1)])


@dataclass
class CopyMatchAttributor(_Control):
    """The copy control: the longest target run copied from the prompt over each prompt token, ties by idf."""

    name: ClassVar[str] = "copy_match"

    def _prompt_scores(self, prompt, target):
        runs = copy_run_lengths(prompt, target)
        best = (runs.max(axis=0) if runs.shape[0] else np.zeros(prompt.size, dtype=np.int64)).astype(np.float64)
        tie = prompt_idf(prompt) / (np.log(max(prompt.size, 1)) + 1.0)  # in [0, 1): orders equal runs only
        row = np.where(best > 0, best + tie, 0.0).astype(np.float32)
        return np.broadcast_to(row, (target.size, prompt.size))


@dataclass
class PositionAttributor(_Control):
    """The recency prior: ``(p + 1) / P`` for prompt token p, the same in every row."""

    name: ClassVar[str] = "position"

    def _prompt_scores(self, prompt, target):
        P = prompt.size
        return np.broadcast_to(np.arange(1, P + 1, dtype=np.float32) / max(P, 1), (target.size, P))


def sentence_token_counts(sentences: list[np.ndarray], P: int) -> np.ndarray:
    """(P,) for each prompt token, the token count of the sentence (``SentenceUnits.prompt``) it lies in."""
    out = np.zeros(P, dtype=np.int64)
    for cols in sentences:
        out[np.asarray(cols, dtype=np.int64)] = len(cols)
    return out


def source_token_counts(sources: list[np.ndarray]) -> np.ndarray:
    """A source rule: a source's score is its token count (not the sum of its tokens' scores, its count squared)."""
    return np.array([len(s) for s in sources], dtype=np.float64)


@dataclass
class LengthAttributor(_Control):
    """The length prior: a prompt token scores the token count of its sentence, a source its token count."""

    name: ClassVar[str] = "length"

    def _scores(self, tokenizer, ctx, prompt, target):
        if tokenizer is None:
            raise ValueError("length: needs the tokenizer, to split the prompt into sentences")
        # the sentences the sources are made of (metrics.source_ablation: SentenceUnits.of, the same split)
        row = sentence_token_counts(SentenceUnits.of(tokenizer, ctx).prompt, prompt.size).astype(np.float32)
        return np.broadcast_to(row, (target.size, prompt.size))

    def _source_rule(self):
        return source_token_counts
