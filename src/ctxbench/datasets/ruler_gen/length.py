"""Length control by incremental token counting.

Upstream RULER binary-searches the haystack size and re-tokenises the whole input at every probe. Here every haystack
unit (a noise line, an essay sentence, a distractor needle or document, each with its separator) is tokenised once
(memoised across samples), the counts are summed to pick the unit count, and a single exact tokenisation of the rendered
input corrects the estimate (token merges across unit boundaries make the sum inexact by a few tokens). A wrong guess is
repaired by stepping the unit count from the exact count, keeping the largest count known to fit.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, Generic, Optional, Sequence, TypeVar

from ctxbench.core.errors import ConfigError

T = TypeVar("T")


class BudgetTooSmall(ConfigError):
    """Even the smallest haystack does not fit the token budget (a ``length`` too small for the task: one line, exit
    code 2)."""


def tokenizer_record(tokenizer) -> dict:
    """What identifies the tokenizer a file was fitted with: ``name_or_path`` (a hub id, or a local folder's name) and
    ``vocab_sha256``, the sha256 of its vocabulary (``get_vocab()``, added tokens included, as sorted ``[token, id]``
    pairs in compact JSON). The fingerprint is what a mismatch is judged by: the same tokenizer loaded from another
    folder has another name but the same fingerprint."""
    name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    if os.path.isabs(name) or os.path.exists(name):
        name = Path(name).name  # a local folder: its name only, so that files do not depend on where it lies
    try:
        vocab = tokenizer.get_vocab()
    except (AttributeError, NotImplementedError, TypeError):
        return {"name_or_path": name, "vocab_sha256": None}
    blob = json.dumps(sorted(vocab.items()), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return {"name_or_path": name, "vocab_sha256": hashlib.sha256(blob).hexdigest()}


class TokenCounter:
    """Token counts with the configured tokenizer, without special tokens (as upstream's ``text_to_tokens``)."""

    def __init__(self, tokenizer, memo_limit: int = 500_000):
        self.tokenizer = tokenizer
        self._memo: dict[str, int] = {}
        self._memo_limit = memo_limit
        self.exact_calls = 0
        self.exact_seconds = 0.0
        self._record: Optional[dict] = None

    def _lengths(self, texts: list[str]) -> list[int]:
        # The Rust tokenizer directly when there is one: same ids, without the Python-side conversion of encodings.
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:
            return [len(e.ids) for e in backend.encode_batch(texts, add_special_tokens=False)]
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def count(self, text: str) -> int:
        """Exact token count of a whole text (not memoised: inputs are unique)."""
        t0 = time.perf_counter()
        n = self._lengths([text])[0]
        self.exact_seconds += time.perf_counter() - t0
        self.exact_calls += 1
        return n

    def units(self, texts: Sequence[str]) -> list[int]:
        """Token counts of haystack units, tokenising only the unseen ones, in one batch call."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            lengths = self._lengths(missing)
            if len(self._memo) + len(missing) > self._memo_limit:
                self._memo.clear()  # bounded memory for very long runs; counts are recomputed on demand
            self._memo.update(zip(missing, lengths))
        return [self._memo[t] if t in self._memo else self.units([t])[0] for t in texts]

    def tokens(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @property
    def record(self) -> dict:
        """``tokenizer_record`` of the tokenizer, computed once (hashing the vocabulary takes ~0.1 s)."""
        if self._record is None:
            self._record = tokenizer_record(self.tokenizer)
        return self._record


class UnitCosts:
    """Lazily computed token costs of unit i = 0, 1, ... (batched), for pools too large to count up front."""

    def __init__(self, counter: TokenCounter, unit_text: Callable[[int], str], n_units: int, chunk: int = 64):
        self.counter, self.unit_text, self.n_units, self.chunk = counter, unit_text, n_units, chunk
        self._costs: list[int] = []

    def __len__(self) -> int:
        return self.n_units

    def __getitem__(self, i: int) -> int:
        while len(self._costs) <= i:
            start = len(self._costs)
            stop = min(self.n_units, start + self.chunk)
            if start >= stop:
                raise IndexError(i)
            self._costs.extend(self.counter.units([self.unit_text(j) for j in range(start, stop)]))
        return self._costs[i]


@dataclass
class Fit(Generic[T]):
    units: list[int]      # haystack units used (indices into the unit stream, in order)
    rendered: T           # what render(units) returned
    tokens: int           # exact token count of the input
    budget: int           # max_seq_length - tokens_to_generate (- template tokens)
    # smallest cost among the units looked at but left out (None: none) — bounds the slack
    next_unit_tokens: Optional[int]
    exact_counts: int     # exact tokenisations spent on this fit

    @property
    def n_units(self) -> int:
        return len(self.units)


def _select(costs: Sequence[int], slack: int, lookahead: int, exclude: set[int]) -> tuple[list[int], Optional[int]]:
    """Units in stream order while they fit the estimated slack; then up to ``lookahead`` more units are examined and
    the ones that still fit are taken (a long sentence or document is skipped rather than ending the fill).
    Returns (chosen, smallest cost examined but not taken)."""
    chosen: list[int] = []
    skipped: Optional[int] = None
    misses = 0
    for i in range(len(costs)):
        if i in exclude:
            continue
        c = costs[i]
        if c <= slack:
            chosen.append(i)
            slack -= c
        else:
            skipped = c if skipped is None else min(skipped, c)
            misses += 1
            if misses > lookahead:
                break
    return chosen, skipped


def fit_units(render: Callable[[list[int]], T], text_of: Callable[[T], str], costs: Sequence[int], budget: int,
              counter: TokenCounter, *, lookahead: int = 0, max_rounds: int = 8) -> Fit[T]:
    """As many units as fit: ``render(units)`` (units in stream order) has <= budget tokens.

    ``render`` must be deterministic in its argument; ``costs[i]`` is the token cost of unit i with its separator.
    Rounds: pick units by summed costs for the exact slack left, render, count once exactly. Over budget: drop the last
    picked units until their costs cover the excess (a single unit that does not fit is set aside). Under budget with
    room left: the next round adds more. Usually two exact counts (bare prompt, first fill).
    """
    base_r = render([])
    best_t = counter.count(text_of(base_r))
    calls = 1
    if best_t > budget:
        raise BudgetTooSmall(f"the prompt without any haystack already has {best_t} tokens > budget {budget}: "
                             f"raise the length (length=..., max_seq_length)")
    best_r, taken, rejected = base_r, [], set()
    while calls <= max_rounds:
        extra, _ = _select(costs, budget - best_t, lookahead, set(taken) | rejected)
        if not extra:
            break  # nothing else fits: done
        while extra and calls <= max_rounds:
            cand = sorted(taken + extra)
            r = render(cand)
            t = counter.count(text_of(r))
            calls += 1
            if t <= budget:
                taken, best_r, best_t = cand, r, t
                break
            excess = t - budget
            while extra and excess > 0:
                dropped = extra.pop()
                excess -= costs[dropped]
            if not extra:
                rejected.add(dropped)  # the estimate was too optimistic for this unit here; try others
    _, skipped = _select(costs, budget - best_t, lookahead, set(taken) | rejected)
    for i in rejected:
        skipped = costs[i] if skipped is None else min(skipped, costs[i])
    return Fit(taken, best_r, best_t, budget, skipped, calls)
