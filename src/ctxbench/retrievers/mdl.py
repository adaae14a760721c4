"""MDLRetriever: among a few candidate sets of in-context examples, keep the one under which the causal LM is most
certain of the label (minimum description length; Wu et al. 2022, "Self-adaptive In-context Learning",
arXiv 2212.10375; OpenCompass's MDLRetriever keeps the behaviour, our own code).

For each query: the top ``candidate_num`` pool rows by embedding similarity (the dense retriever); ``select_time``
candidate sets of ``k`` rows: the first is the top ``k``, the others are drawn from the candidates without replacement
by the row's own generator seeded by ``(seed, row id)``. Each set is rendered with ``template`` into what the model is
sent (``ICLTemplate.for_model``: the chat template's text for chat models), each label is appended, and the model's
mean cross-entropy of the label's tokens, as the whole text tokenises (``label_nll``), given what precedes them is
turned into a distribution over the labels (``p ∝ exp(-CE)``). The set with the lowest entropy of that distribution
wins (ties: the earlier set). Its rows are returned in their set order (scores ``k - rank``); ``last_entropy`` maps
each query id to the winning set's entropy.

``labels``: the label strings; None = the distinct non-empty values of ``label_field`` in the pool (OpenCompass uses
the test set's output column), at least two. The model: handed over by the stage with ``use_lm`` (the model it already
loaded), otherwise loaded on first use from ``lm`` (a ``ModelConfig``; its dequantised cache under the embedder's
``cache_dir``). Cost: queries x select_time x labels sequences through the LM, ``batch_size`` at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import numpy as np

from ctxbench.utils import progress
from ctxbench.models.logits import mean_query_logprobs
from ctxbench.models.spec import ModelConfig
from ctxbench.core.part import neutral, param, refuse
from ctxbench.prompts.icl import ICLTemplate, box_template
from ctxbench.retrievers.base import Retrieved, Row, rank_scores, row_id, row_rng
from ctxbench.retrievers.dense import DenseRetriever
from ctxbench.utils.tokens import has_chat_template


def label_nll(model, tokenizer, prefix: str, labels: list[str], *, add_special_tokens: bool,
              batch_size: int = 8) -> np.ndarray:
    """Mean negative log-likelihood per token of each label as it appears in the rendered text ``prefix + label``.

    The whole text is tokenised at once and the label's tokens are those that cover any of its characters, so a
    label after ``Answer type: `` is scored as the text has it (``' number'``), not as tokenised on its own
    (``'number'`` after a lone ``' '``); a token that straddles the boundary counts as the label's. An empty label
    scores 0.
    """
    rows = []
    for lb in labels:
        enc = tokenizer(prefix + lb, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        # special tokens have empty (0, 0) offsets and stay in the prefix
        start = next((i for i, (a, z) in enumerate(offsets) if z > len(prefix) and z > a), len(ids))
        if start == 0:
            raise ValueError("mdl: the rendered prompt produced no tokens before the label")
        rows.append((ids[:start], ids[start:]))
    scored = [i for i, (_, label) in enumerate(rows) if label]
    out = np.zeros(len(labels), dtype=np.float64)
    if scored:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        out[scored] = -mean_query_logprobs(model, [rows[i] for i in scored], pad_id=pad, batch_size=batch_size,
                                           what="mdl labels")
    return out


def label_entropy(nll: np.ndarray) -> float:
    """Entropy of the label distribution ``p ∝ exp(-nll)``."""
    z = -nll - np.max(-nll)
    p = np.exp(z) / np.exp(z).sum()
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


@dataclass(kw_only=True)
class MDLRetriever(DenseRetriever):
    """``ice_num`` rows per query chosen by minimum label entropy (module doc)."""

    name: ClassVar[str] = "mdl"
    needs_lm: ClassVar[bool] = True

    candidate_num: int = param(8, ge=1)
    select_time: int = param(5, ge=1)
    seed: int = 1
    labels: Optional[list[str]] = None
    label_field: str = "answer"
    template: Optional[ICLTemplate] = None
    lm: Optional[ModelConfig] = None
    batch_size: int = neutral(8, ge=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.candidate_num < self.ice_num:
            raise refuse("candidate_num", self.candidate_num, f"must be >= ice_num ({self.ice_num})")
        if self.labels is not None:
            self.labels = [str(x) for x in self.labels]
            if len(set(self.labels)) < 2:
                raise refuse("labels", self.labels, "need at least two distinct labels")
        if isinstance(self.template, dict):
            self.template = ICLTemplate(**self.template)
        if self.template is None:
            self.template = box_template()
        if isinstance(self.lm, dict):
            self.lm = ModelConfig(**self.lm)
        self.last_entropy: dict[str, float] = {}
        self._model: Any = None
        self._tokenizer: Any = None

    def use_lm(self, loaded_lm: Any) -> None:
        if loaded_lm is not None:  # an endpoint model: mdl loads ``lm`` itself
            self._model, self._tokenizer = loaded_lm.model, loaded_lm.tokenizer

    def use_template(self, template: ICLTemplate) -> None:
        self.template = template

    def _lm(self):
        if self._model is None:
            if self.lm is None:
                raise ValueError("mdl needs a causal LM: the stage hands over its model (use_lm) or set retriever.lm")
            from ctxbench.models import load_causal_lm

            loaded = load_causal_lm(self.lm, cache_dir=self.embedder.cache_dir)
            self._model, self._tokenizer = loaded.model, loaded.tokenizer
        return self._model, self._tokenizer

    def _fit(self, rows: list[Row]) -> None:
        super()._fit(rows)
        if self.labels is None:
            found = sorted({str(r[self.label_field]).strip() for r in rows
                            if r.get(self.label_field) is not None and str(r[self.label_field]).strip()})
            if len(found) < 2:
                raise ValueError(f"label_field={self.label_field!r}: the pool has {len(found)} distinct label(s); "
                                 f"mdl needs at least two (or set labels)")
            self._labels = found
        else:
            self._labels = list(self.labels)

    def candidate_sets(self, query: Row, cands: list[int], k: int) -> list[list[int]]:
        """The ``select_time`` candidate sets of one query: the top ``k``, then seeded draws."""
        rng = row_rng(self.seed, row_id(query))
        sets = [cands[:k]]
        for _ in range(self.select_time - 1):
            sets.append([cands[int(i)] for i in rng.choice(len(cands), size=k, replace=False)])
        return sets

    def _ranked(self, queries: list[Row], k: int, q_emb: np.ndarray) -> list[Retrieved]:
        ranked = self.ranked_hits(queries, q_emb, max(self.candidate_num, k), need=k)
        model, tok = (None, None) if k == 0 else self._lm()
        chat = has_chat_template(tok)
        if k == 0:
            return [Retrieved([], []) for _ in queries]
        out = []
        with progress.bar(len(queries), "mdl", "query") as bar:
            for q, hits in zip(queries, ranked):
                cands = [i for _, i in hits]
                best, best_h = None, np.inf
                for s in self.candidate_sets(q, cands, k):
                    prefix = self.template.for_model(q, [self.pool[i] for i in s], tok).text
                    h = label_entropy(label_nll(model, tok, prefix, self._labels, add_special_tokens=not chat,
                                                batch_size=self.batch_size))
                    if h < best_h:
                        best, best_h = s, h
                self.last_entropy[row_id(q)] = best_h
                out.append(Retrieved(list(best), rank_scores(len(best))))
                bar.update(1)
        return out
