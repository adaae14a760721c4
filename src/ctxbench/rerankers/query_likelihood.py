"""``reranker=query_likelihood``: the offline default reranker, the causal LM of the ``model`` group as a scorer.

score(query, passage) = mean over the query's tokens of log P(token | prompt, earlier query tokens), the prompt being
``prompt`` with the passage in place of ``{passage}`` (default "Passage: {passage}\\nPlease write a question based on
this passage.\\nQuestion: {query}"): how well the passage explains the question (query-likelihood ranking, as in
Sachan et al.'s UPR). The mean, not the sum, so long questions are not penalised.

Tokens: the prompt's literal pieces, the passage (cut to ``passage_max_length`` tokens) and the query (cut to
``query_max_length``) are tokenised apart, without special tokens, and joined; the spaces just before ``{passage}`` and
``{query}`` go with the text that follows, so a BPE tokenizer reads " What" as in running text. Rows are sorted by
length and run ``batch_size`` at a time; with ``padding_side`` left (default) every row ends at the last column, so the
LM head runs only on the last (longest query + 1) positions; position ids follow the attention mask, so padding does
not move a token's position. ``right`` padding never passes position ids (for model classes that ignore them). Either
way a score equals the unpadded, unbatched one up to float rounding.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from ctxbench.core.errors import ConfigError
from ctxbench.utils.files import safe_filename
from ctxbench.models.logits import PADDING_SIDES, mean_query_logprobs
from ctxbench.core.part import neutral, param, refuse
from ctxbench.rerankers.base import Pair, Reranker, check_pairs
from ctxbench.utils.tokens import eos_ids

log = logging.getLogger(__name__)

DEFAULT_PROMPT = "Passage: {passage}\nPlease write a question based on this passage.\nQuestion: {query}"


def split_prompt(prompt: str) -> tuple[str, str, str, str]:
    """``(head, passage lead, middle, query lead)``: the text before ``{passage}`` without its trailing spaces, those
    spaces (tokenised with the passage), the text between the slots without its trailing spaces, and those spaces
    (tokenised with the query)."""
    head, rest = prompt.split("{passage}")
    middle = rest[:rest.index("{query}")]
    head_core = head.rstrip(" ")
    middle_core = middle.rstrip(" ")
    return head_core, head[len(head_core):], middle_core, middle[len(middle_core):]


@dataclass
class QueryLikelihoodReranker(Reranker):
    """``prompt``: the scoring prompt with one ``{passage}`` and ``{query}`` at its end; ``batch_size``: rows per
    forward pass; ``passage_max_length`` / ``query_max_length``: tokens kept of each (the passage's head, the query's
    head); ``padding_side``: left | right (module doc)."""

    prompt: str = DEFAULT_PROMPT
    batch_size: int = neutral(16, ge=1)
    passage_max_length: int = param(512, ge=1)
    query_max_length: int = param(128, ge=1)
    # the attention mask and positions make both sides score alike
    padding_side: str = neutral("left", choices=PADDING_SIDES)

    needs_lm: ClassVar[bool] = True
    kind: ClassVar[str] = "query_likelihood"

    def __post_init__(self) -> None:
        if self.prompt.count("{passage}") != 1 or self.prompt.count("{query}") != 1:
            raise refuse("prompt", self.prompt, "needs exactly one {passage} and one {query}")
        if not self.prompt.endswith("{query}") or self.prompt.index("{passage}") > self.prompt.index("{query}"):
            raise refuse("prompt", self.prompt, "must end with {query}, after {passage} (the query's tokens are the "
                         "continuation scored)")
        self._lm = None

    def use_lm(self, loaded_lm: Any) -> None:
        if loaded_lm is None or not hasattr(loaded_lm, "model") or not hasattr(loaded_lm, "tokenizer"):
            raise ConfigError("reranker query_likelihood scores with the local causal LM: hand it a LoadedLM "
                             f"(model.backend=hf), got {type(loaded_lm).__name__}")
        self._lm = loaded_lm

    def _require(self):
        if self._lm is None:
            raise RuntimeError("reranker query_likelihood: no model handed over (call use_lm(loaded_lm) first)")
        return self._lm

    @property
    def name(self) -> str:
        """``query_likelihood-<model name>``, so runs with different LMs stay apart (needs the bound model)."""
        return f"{self.kind}-{safe_filename(self._require().config.name)}"

    def identity(self) -> dict[str, Any]:
        """The handed-over model: its name, where it was loaded from and the dtype it runs in."""
        lm = self._require()
        cfg, src = lm.config, lm.source
        return {"model": cfg.name, "path": cfg.path, "location": src.location, "gguf_file": src.gguf_file,
                "revision": cfg.revision, "dtype": str(next(lm.model.parameters()).dtype).replace("torch.", "")}

    def token_rows(self, pairs: Sequence[Pair]) -> list[tuple[list[int], list[int]]]:
        """``(context ids, query ids)`` of each pair (module doc)."""
        tok = self._require().tokenizer
        head, passage_lead, middle, query_lead = split_prompt(self.prompt)

        def ids(texts: list[str], limit: int | None = None) -> list[list[int]]:
            enc = tok(texts, add_special_tokens=False)["input_ids"]
            return [list(x)[:limit] if limit else list(x) for x in enc]

        head_ids, middle_ids = ids([head, middle])
        passages = ids([passage_lead + p for _, p in pairs], self.passage_max_length)
        queries = ids([query_lead + q for q, _ in pairs], self.query_max_length)
        return [(head_ids + p + middle_ids, q) for p, q in zip(passages, queries)]

    def score(self, pairs: Sequence[Pair]) -> np.ndarray:
        pairs = check_pairs(pairs)
        if not pairs:
            return np.zeros(0, dtype=np.float64)
        rows = self.token_rows(pairs)
        empty = [i for i, (_, q) in enumerate(rows) if not q]
        if empty:
            raise ValueError(f"pairs[{empty[0]}]: the query has no tokens to score")
        lm = self._require()
        tok = lm.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else (eos_ids(tok) or [0])[0]
        return mean_query_logprobs(lm.model, rows, pad_id=pad, batch_size=self.batch_size,
                                   padding_side=self.padding_side)
