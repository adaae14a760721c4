"""``reranker=cross_encoder``: any transformers sequence-classification model folder (or hub id) scores each pair.

Follows FlagEmbedding's encoder-only reranker (``BaseReranker.compute_score``) so its figures carry over: the query
gets ``query_instruction_for_rerank`` through ``query_instruction_format_for_rerank`` (``"{}{}"``, a literal ``\\n`` a
newline) and the passage likewise; the query is tokenised alone and cut to ``query_max_length`` tokens (default 3/4 of
``max_length``), the passage to what ``max_length`` leaves, and the pair is joined with the model's special tokens (its
tokenizer's post-processor). Pairs are sorted by token count (longest first), padded per batch, and the single
logit is the score; ``normalize`` maps it through the sigmoid. fp16 (or bf16) on GPU when asked, fp32 on CPU.

No cross-encoder with weights is packaged on PyPI for offline use: ``model`` must be given.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional, Sequence

import numpy as np

from ctxbench.utils import progress
from ctxbench.models.embedder import PACKAGE_PREFIX, folder_fingerprint, resolve_model_path
from ctxbench.core.part import neutral, param, refuse
from ctxbench.rerankers.base import Pair, Reranker, check_format, check_pairs, instruct

log = logging.getLogger(__name__)


@dataclass
class CrossEncoderReranker(Reranker):
    """``model``: a folder, hub id or ``pypkg:<package>`` holding an ``AutoModelForSequenceClassification`` with one
    label; ``batch_size`` pairs per forward pass; ``max_length``: tokens of the joined pair; ``query_max_length``:
    tokens of the query (None: 3/4 of ``max_length``, as FlagEmbedding); ``normalize``: sigmoid of the logit;
    ``device``: auto | cpu | cuda | cuda:N."""

    model: str
    batch_size: int = neutral(128, ge=1)
    max_length: int = param(512, ge=1)
    query_max_length: Optional[int] = param(None, ge=1)
    query_instruction_for_rerank: Optional[str] = None
    query_instruction_format_for_rerank: str = "{}{}"
    passage_instruction_for_rerank: Optional[str] = None
    passage_instruction_format_for_rerank: str = "{}{}"
    normalize: bool = False
    use_fp16: bool = neutral(True)  # the dtype they lead to is part of identity()
    use_bf16: bool = neutral(False)
    device: str = neutral("auto")
    revision: Optional[str] = None
    trust_remote_code: bool = neutral(False)

    kind: ClassVar[str] = "cross_encoder"  # the name's first part (name: kind and model)

    def __post_init__(self) -> None:
        if not self.model:
            raise refuse("model", self.model, "must name a sequence-classification model folder, hub id or "
                         "pypkg:<package>")
        if self.query_max_length is not None and self.query_max_length >= self.max_length:
            raise refuse("query_max_length", self.query_max_length,
                         f"must be below max_length={self.max_length} (the passage needs room)")
        check_format("query_instruction_format_for_rerank", self.query_instruction_format_for_rerank)
        check_format("passage_instruction_format_for_rerank", self.passage_instruction_format_for_rerank)
        self._model = None
        self._tokenizer = None
        self._backend = None
        self._device = None

    @property
    def name(self) -> str:
        if self.model.startswith(PACKAGE_PREFIX):
            return self.model[len(PACKAGE_PREFIX):]
        return Path(self.model.rstrip("/")).name or self.model

    @property
    def effective_query_max_length(self) -> int:
        return self.query_max_length if self.query_max_length is not None else self.max_length * 3 // 4

    def _device_and_dtype(self):
        import torch

        device = torch.device("cuda" if self.device == "auto" and torch.cuda.is_available() else
                              ("cpu" if self.device == "auto" else self.device))
        dtype = torch.float32
        if device.type == "cuda":
            dtype = torch.bfloat16 if self.use_bf16 else (torch.float16 if self.use_fp16 else torch.float32)
        return device, dtype

    def identity(self) -> dict[str, Any]:
        """Known without loading the model: a local folder by its files' fingerprint (a hub id by its id and
        ``revision``), the dtype it runs in, and the query length in effect."""
        location, is_local = resolve_model_path(self.model)
        _, dtype = self._device_and_dtype()
        return {"files": folder_fingerprint(location) if is_local else None,
                "dtype": str(dtype).replace("torch.", ""), "query_max_length": self.effective_query_max_length}

    def load(self) -> "CrossEncoderReranker":
        if self._model is not None:
            return self
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        location, _ = resolve_model_path(self.model)
        kwargs = dict(revision=self.revision, trust_remote_code=self.trust_remote_code)
        device, dtype = self._device_and_dtype()
        self._tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
        if getattr(self._tokenizer, "backend_tokenizer", None) is None:
            raise ValueError(f"model={self.model}: the cross-encoder reranker needs a fast (tokenizers) tokenizer")
        # pairs are joined by the backend's own post-processor (the model's special tokens); padding and truncation
        # saved with the tokenizer are dropped here, since score() pads each batch and pair_inputs() truncates
        self._backend = copy.deepcopy(self._tokenizer.backend_tokenizer)
        self._backend.no_padding()
        self._backend.no_truncation()
        model = AutoModelForSequenceClassification.from_pretrained(location, dtype=dtype, **kwargs)
        if model.config.num_labels != 1:
            raise ValueError(f"model={self.model}: a cross-encoder reranker needs one output label, "
                             f"this model has {model.config.num_labels}")
        self._model = model.to(device).eval()
        self._device = device
        log.info("reranker %s loaded on %s (%s)", location, device, str(dtype).replace("torch.", ""))
        return self

    def pair_inputs(self, pairs: Sequence[Pair]) -> list[dict]:
        """Each joined pair's unpadded model inputs (``input_ids``, and ``token_type_ids`` where the model has them),
        instructions applied and truncated as FlagEmbedding does: the query to ``effective_query_max_length`` tokens,
        then the passage to what ``max_length`` leaves after the query and the special tokens."""
        self.load()
        queries = [instruct(self.query_instruction_format_for_rerank, self.query_instruction_for_rerank, q)
                   for q, _ in pairs]
        passages = [instruct(self.passage_instruction_format_for_rerank, self.passage_instruction_for_rerank, p)
                    for _, p in pairs]
        bt = self._backend
        special = bt.num_special_tokens_to_add(is_pair=True)
        q_enc = bt.encode_batch(queries, add_special_tokens=False)
        p_enc = bt.encode_batch(passages, add_special_tokens=False)
        names = self._tokenizer.model_input_names
        items = []
        for q, p in zip(q_enc, p_enc):
            q.truncate(self.effective_query_max_length)
            p.truncate(max(0, self.max_length - len(q.ids) - special))
            joined = bt.post_process(q, p, add_special_tokens=True)
            item = {"input_ids": joined.ids}
            if "token_type_ids" in names:
                item["token_type_ids"] = joined.type_ids
            items.append(item)
        return items

    def score(self, pairs: Sequence[Pair]) -> np.ndarray:
        import torch

        pairs = check_pairs(pairs)
        if not pairs:
            return np.zeros(0, dtype=np.float64)
        items = self.pair_inputs(pairs)
        order = np.argsort([-len(it["input_ids"]) for it in items], kind="stable")  # longest first: less padding
        out = np.empty(len(items), dtype=np.float64)
        with torch.inference_mode(), progress.bar(len(order), "rerank", "pair") as bar:
            for start in range(0, len(order), self.batch_size):
                sel = order[start:start + self.batch_size]
                inputs = self._tokenizer.pad([items[i] for i in sel], padding=True, return_tensors="pt")
                out[sel] = self._model(**inputs.to(self._device)).logits.view(-1).float().cpu().numpy()
                bar.update(len(sel))
        if self.normalize:
            out = 1.0 / (1.0 + np.exp(-out))
        return out
