"""Source ablations shared by the set-free scorers (``lds``, ``topk``; docs/metrics.md): the explained target's
log-probability with some of the prompt's sources removed.

The sources are ContextCite's (Cohen-Wang et al., NeurIPS 2024): the prompt's sentences, except those of a question the
data marks. An ablation keeps a subset of them and deletes the others' tokens (``context_cite.deleted_token_logprobs``),
and scores, teacher-forced, the summed log-probability of every generated token (``"all"``: what the seq view explains)
and of the sink span's tokens (``"sink"``: what the row and recursive views explain; the whole generation without a
sink span). No token deletion set of a method is involved: what is removed is whole sentences, chosen by a seeded draw
(LDS) or by the method's own sentence ranking (top-k), the same for every method's scores.

An example's ablations are run once: the scores are kept by kept-subset in ``<job dir>/ablations/<example>-<digest>
.json`` (the digest covers the model, its dtype, the input tokens and the sink span) and in memory, so every method of
the run, both scorers, and a rerun in the same job dir reuse them. The mask draws are recorded in the same file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Optional, Sequence

import numpy as np

from ctxbench.attribution.base import InputContext
from ctxbench.attribution.context_cite import (ablation_masks, deleted_token_logprobs, dropped_positions, example_rng,
                                               source_sentences)
from ctxbench.attribution.perturbation import SentenceUnits
from ctxbench.attribution.memory import ablation_passes
from ctxbench.utils.files import atomic_write_text, safe_filename
from ctxbench.metrics.scorer import Scorer
from ctxbench.utils.tokens import eos_id

TARGETS = {"seq": "all", "row": "sink", "rec": "sink"}  # view -> the target it explains
FORMAT = 1
MASK_STREAM = 0x4C4453  # "LDS": the held-out masks' stream of example_rng


def bits(keep: Sequence[bool]) -> str:
    """A kept-subset's key: one '1' (kept) or '0' (removed) per source."""
    return "".join("1" if k else "0" for k in keep)


@dataclass
class SourceAblations:
    """One example's sources and the target scores of the subsets run so far (``scores[bits] = {"all", "sink"}``).

    ``sources[j]``: the prompt-token indices (0..P-1) of source j; ``masks``: the draws recorded, by their settings."""

    sources: list[np.ndarray]
    scores: dict[str, dict[str, float]]
    masks: dict[str, list[str]]
    path: Optional[Path]
    meta: dict

    @property
    def n_sources(self) -> int:
        return len(self.sources)

    def source_scores(self, w, rule: Optional[Callable[[list[np.ndarray]], np.ndarray]] = None) -> np.ndarray:
        """(S,) a method's score of each source: ``rule(sources)`` where the method gives one
        (``AttributionResult.source_scores``), else the sum of its prompt weights over the source's tokens (NaN as 0).
        The sum is a length prior (a long sentence collects more weight), which a method's own rule can avoid."""
        if rule is not None:
            out = np.asarray(rule(self.sources), dtype=np.float64).reshape(-1)
            if out.size != self.n_sources:
                raise ValueError(f"a source rule gave {out.size} scores for {self.n_sources} sources")
            return out
        w = np.nan_to_num(np.asarray(w, dtype=np.float64).reshape(-1), nan=0.0)
        return np.array([float(w[s].sum()) for s in self.sources], dtype=np.float64)

    def target(self, keep: Sequence[bool], view: str) -> float:
        return self.scores[bits(keep)][TARGETS[view]]

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, **self.meta, "sources": [s.tolist() for s in self.sources],
                           "masks": self.masks, "scores": self.scores}, sort_keys=True)


class AblationStore:
    """Where the ablation scores live: the job dir's ``ablations/`` folder (None: memory only) and the example scored
    last (every method of an example is scored in a row)."""

    def __init__(self, folder: Optional[Path] = None):
        self.folder = None if folder is None else Path(folder)
        self._last: Optional[tuple[str, SourceAblations]] = None

    def for_example(self, model, tokenizer, prepared) -> SourceAblations:
        ctx = InputContext.from_model_input(model, prepared.model_input)
        meta = {"model": str(getattr(model.config, "_name_or_path", type(model).__name__)),
                "dtype": str(getattr(model, "dtype", None) or next(model.parameters()).dtype),
                "example_id": str(prepared.example.example_id),
                "sink_span": None if prepared.sink_span is None else [int(x) for x in prepared.sink_span]}
        h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
        h.update(ctx.input_ids.cpu().numpy().astype(np.int64).tobytes())
        h.update(ctx.prompt_positions.cpu().numpy().astype(np.int64).tobytes())
        h.update(str(ctx.gen_start).encode())
        key = f"{safe_filename(prepared.example.example_id)}-{h.hexdigest()[:12]}"
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        path = None if self.folder is None else self.folder / f"{key}.json"
        if path is not None and path.exists():
            got = json.loads(path.read_text(encoding="utf-8"))
            ab = SourceAblations([np.asarray(s, dtype=np.int64) for s in got["sources"]], got["scores"],
                                 got["masks"], path, {k: got[k] for k in meta})
        else:
            units = SentenceUnits.of(tokenizer, ctx)
            ab = SourceAblations([np.asarray(units.prompt[u], dtype=np.int64) for u in source_sentences(units, ctx)],
                                 {}, {}, path, meta)
        self._last = (key, ab)
        return ab

    def ensure(self, model, tokenizer, prepared, ab: SourceAblations, subsets: Sequence[Sequence[bool]],
               batch_size: int) -> dict:
        """Run the subsets not scored yet (one batched set of forward passes) and save the file; the counts run and
        reused."""
        todo = list(dict.fromkeys(bits(k) for k in subsets if bits(k) not in ab.scores))
        if todo:
            ctx = InputContext.from_model_input(model, prepared.model_input)
            deletions = dropped_positions(ctx, ab.sources, ([c == "1" for c in b] for b in todo))
            logp = deleted_token_logprobs(model, ctx.input_ids, ctx.gen_start, deletions, eos_id(tokenizer),
                                          batch_size)
            s, e = prepared.sink_span if prepared.sink_span is not None else (0, ctx.G - 1)
            for b, row in zip(todo, logp):
                ab.scores[b] = {"all": float(row.sum()), "sink": float(row[s:e + 1].sum())}
            self.save(ab)
        n = len(dict.fromkeys(bits(k) for k in subsets))
        return {"run": len(todo), "reused": n - len(todo)}

    def masks(self, prepared, ab: SourceAblations, seed: int, n: int, keep_prob: float) -> np.ndarray:
        """(n, S) the seeded draw for this example (``context_cite.example_rng``: the seed and the input's tokens, in
        a stream of its own, so that ContextCite with the same seed is never scored on the ablations it was fitted
        on), recorded in the file under its settings."""
        rng = example_rng(seed, prepared.model_input.input_ids, stream=MASK_STREAM)
        masks = ablation_masks(rng, n, ab.n_sources, keep_prob)
        key = f"seed={seed},n={n},keep_prob={keep_prob:g}"
        if key not in ab.masks:
            ab.masks[key] = [bits(m) for m in masks]
            self.save(ab)
        return masks

    @staticmethod
    def save(ab: SourceAblations) -> None:
        if ab.path is not None:
            ab.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(ab.path, ab.to_json())


class AblationScorer(Scorer):
    """A scorer of source ablations (its dataclass declares ``batch_size``, ablated inputs per forward pass); the
    store is the job dir's."""
    log_probs_only: ClassVar[bool] = True

    def use_job_dir(self, path) -> None:
        self._folder = None if path is None else Path(path) / "ablations"

    @property
    def store(self) -> AblationStore:
        return store_for(getattr(self, "_folder", None))

    def memory_need(self, shape, T, G):
        return ablation_passes(shape, T, G, int(self.batch_size), padded=True)


# The store of the job under way: lds and topk share it (set by the stage through Scorer.use_job_dir); one job at a
# time, since the last example of another job is of no use.
_STORE: Optional[AblationStore] = None


def store_for(folder: Optional[Path]) -> AblationStore:
    global _STORE
    key = None if folder is None else Path(folder).resolve()
    if _STORE is None or _STORE.folder != key:
        _STORE = AblationStore(key)
    return _STORE
