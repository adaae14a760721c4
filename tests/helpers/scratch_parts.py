"""One part of each kind, written the way docs/usage.md#adding-a-part says, for tests/test_adding_parts.py, which
copies this file into a scratch folder outside the project (the module is imported from there, never from tests/):
an attribution method, a mode (scorer), a dataset kind, a retriever and a model family."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np

from ctxbench.attribution.base import AttributionResult, Attributor, empty_matrix
from ctxbench.attribution.families.llama import LlamaLikeAdapter
from ctxbench.core.part import param
from ctxbench.datasets.base import Dataset, Paths
from ctxbench.example import CachedExample
from ctxbench.metrics.scorer import Metric, Scorer
from ctxbench.retrievers.base import Retrieved, TextRetriever, top_k


@dataclass
class FirstTokensAttributor(Attributor):
    """Scores the first ``n`` prompt tokens 1, the rest 0 (reads token ids only)."""

    name: ClassVar[str] = "first_tokens"
    needs_model: ClassVar[bool] = False
    n: int = param(2, ge=1)

    def _attribute(self, model, tokenizer, ctx, sink, think, timings):
        t0 = time.perf_counter()
        rows = ctx.row_indices()
        A = empty_matrix(ctx.G, ctx.P)
        A[rows] = 0.0
        A[rows, :min(self.n, ctx.P)] = 1.0
        timings["attribution"] = time.perf_counter() - t0
        return AttributionResult(matrix=A, method=self.name, P=ctx.P, G=ctx.G, rows_written=rows)


@dataclass
class TopShareScorer(Scorer):
    """The share of a view's weight on its top ``k`` prompt tokens (model-free)."""

    name: ClassVar[str] = "top_share"
    title: ClassVar[str] = "Top share"
    needs_model: ClassVar[bool] = False
    k: int = param(2, ge=1)

    def metrics(self):
        return [Metric("share", f"Share@{self.k}", higher_is_better=True)]

    def score(self, model, tokenizer, prepared, result, weights):
        def share(w):
            w = np.abs(np.asarray(w, dtype=np.float64))
            return float(np.sort(w)[::-1][:self.k].sum() / w.sum()) if w.sum() > 0 else None
        return {self.name: {v: share(w) for v, w in weights.items()}}

    def values(self, view_record):
        return None if view_record is None else {"share": view_record}


@dataclass(kw_only=True)
class LinesDataset(Dataset):
    """A JSONL file of ``{"id", "context", "answer"}`` lines: the prompt is the context, the target the answer."""

    kind: ClassVar[str] = "lines"
    path: str

    def raw_path(self, paths: Paths, tokenizer=None) -> Path:
        return Path(self.path)

    def load_raw(self, path: Path, tokenizer=None, limit: Optional[int] = None) -> list[CachedExample]:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return [CachedExample(prompt=r["context"], target=r["answer"], indices_to_explain=None,
                              attr_mask_indices=None, sink_span=None, thinking_span=None,
                              metadata={"id": r["id"], "dataset": self.name}) for r in rows[:limit]]


@dataclass(kw_only=True)
class LongestWordRetriever(TextRetriever):
    """Pool rows ranked by the length of their longest word shared with the query."""

    name: ClassVar[str] = "longest_word"
    ice_num: int = param(1, ge=0)

    def _fit(self, rows) -> None:
        self._words = [set(t.split()) for t in self.pool_texts()]

    def _retrieve(self, queries, k: int) -> list[Retrieved]:
        out = []
        for text in self.query_texts(queries):
            q = set(text.split())
            scores = np.array([max((len(w) for w in q & p), default=0) for p in self._words], dtype=np.float64)
            order, best = top_k(scores, k)
            out.append(Retrieved([int(i) for i in order], [float(s) for s in best]))
        return out


class MistralAdapter(LlamaLikeAdapter):
    """A family of its own for Mistral decoders (the Llama-like adapter reads them too; here Mistral is named
    first, so that the refusal and the tests see a new entry of ``FAMILIES``)."""

    label = "Mistral (scratch)"

    @classmethod
    def matches(cls, model) -> bool:
        return getattr(model.config, "model_type", "") == "mistral"

    @classmethod
    def tiny_configs(cls, vocab_size: int) -> dict:
        from transformers import MistralConfig

        return {"mistral": MistralConfig(vocab_size=vocab_size, num_key_value_heads=2, max_position_embeddings=256,
                                         hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=128)}
