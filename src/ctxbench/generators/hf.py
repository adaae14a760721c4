"""``generator=hf``: local transformers generation with the model of the ``model`` group (docs/sampling.md#hf).

The stage loads the model once (``load_causal_lm``) and hands it over with ``use_lm``. Each request is rendered with the
tokenizer's chat template (``add_generation_prompt=True``) unless it carries its pre-rendered ``text``; requests are
sorted by length (longest first) and run in batches of ``batch_size`` with left padding; decoding is greedy unless
``temperature > 0`` (sampling seeded with ``seed`` at the start of every ``generate`` call), stops at any EOS id of the
tokenizer or after ``max_new_tokens``. A batch that fails (e.g. out of memory) is retried one request at a time, and a
request that still fails gets ``error`` set.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import torch

from ctxbench.core.errors import ConfigError
from ctxbench.generators.base import Generation, GenerationRequest, Generator, one_line
from ctxbench.generators.box_guard import BoxGuard
from ctxbench.core.part import neutral, param
from ctxbench.utils.tokens import eos_ids

log = logging.getLogger(__name__)


def render_chat(tokenizer, messages: list, *, enable_thinking: Optional[bool] = None) -> str:
    """The prompt text of a chat for a local model: its chat template with the generation prompt."""
    kwargs: dict[str, Any] = {}
    if enable_thinking is not None:
        kwargs["enable_thinking"] = enable_thinking  # Qwen3-style templates read it; others ignore extra variables
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; "
                         f"give requests a pre-rendered text")
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True, **kwargs)


@dataclass
class HFGenerator(Generator):
    """Batched local generation. ``batch_size``: requests per forward batch; ``max_new_tokens``; ``temperature`` 0 =
    greedy, > 0 = sampling with ``top_p`` and ``seed``; ``repetition_penalty``: transformers' penalty on tokens already
    in the sequence (1.0 = none; small models loop without it); ``enable_thinking``: passed to chat templates that read
    it (Qwen3), None = the template's default; ``box_on_stop``: keep generations in the box format (``BoxGuard``: open
    ``\\box{`` when the model would stop without one, stop once it is closed); ``progress``: a tqdm bar over batches."""

    name: ClassVar[str] = "hf"
    needs_lm: ClassVar[bool] = True
    batch_size: int = neutral(8, ge=1)
    max_new_tokens: int = param(512, ge=1)
    temperature: float = param(0.0, ge=0)
    top_p: float = param(1.0, gt=0, le=1)
    seed: int = 0
    repetition_penalty: float = param(1.0, gt=0)
    enable_thinking: Optional[bool] = None
    box_on_stop: bool = False
    progress: bool = neutral(False)

    def __post_init__(self):
        self._lm = None

    def use_lm(self, loaded_lm: Any) -> None:
        if loaded_lm is None or not hasattr(loaded_lm, "model") or not hasattr(loaded_lm, "tokenizer"):
            raise ConfigError("generator hf runs the local model: hand it a LoadedLM (model.backend=hf), "
                             f"got {type(loaded_lm).__name__}")
        self._lm = loaded_lm

    # -------------------------------------------------------------------------------------------------------------

    def prompt_text(self, request: GenerationRequest) -> str:
        if request.text is not None:
            return request.text
        return render_chat(self._require().tokenizer, request.messages, enable_thinking=self.enable_thinking)

    def _require(self):
        if self._lm is None:
            raise RuntimeError("generator hf: no model bound (call bind(loaded_lm) first)")
        return self._lm

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        lm = self._require()
        tok = lm.tokenizer
        out: dict[int, Generation] = {}
        encoded: list[tuple[int, list[int]]] = []
        for i, req in enumerate(requests):
            try:
                ids = tok(self.prompt_text(req), add_special_tokens=False)["input_ids"]
                encoded.append((i, list(ids)))
            except Exception as exc:  # a request the template or tokenizer cannot take
                out[i] = Generation(req.key, error=one_line(f"prompt: {type(exc).__name__}: {exc}"))
        encoded.sort(key=lambda x: -len(x[1]))
        if self.temperature > 0:
            torch.manual_seed(self.seed)
        batches = [encoded[s:s + self.batch_size] for s in range(0, len(encoded), self.batch_size)]
        if self.progress:
            from tqdm import tqdm

            batches = tqdm(batches, desc="generate", unit="batch")
        for batch in batches:
            try:
                texts = self._run_batch(lm, [ids for _, ids in batch])
            except Exception as exc:
                if len(batch) == 1:
                    i = batch[0][0]
                    out[i] = Generation(requests[i].key, error=one_line(f"{type(exc).__name__}: {exc}"))
                    continue
                log.warning("generation batch of %d failed (%s); retrying one by one", len(batch), one_line(exc, 120))
                texts = []
                for _, ids in batch:
                    try:
                        texts.append(self._run_batch(lm, [ids])[0])
                    except Exception as exc1:
                        texts.append(exc1)
            for (i, ids), res in zip(batch, texts):
                if isinstance(res, Exception):
                    out[i] = Generation(requests[i].key, error=one_line(f"{type(res).__name__}: {res}"))
                else:
                    text, finish, n_new, forced = res
                    out[i] = Generation(requests[i].key, text=text, finish_reason=finish, prompt_tokens=len(ids),
                                        completion_tokens=n_new, forced=forced)
        return [out[i] for i in range(len(requests))]

    @torch.no_grad()
    def _run_batch(self, lm, batch: list[list[int]]) -> list[tuple[str, str, int, list[str]]]:
        from transformers import GenerationConfig, LogitsProcessorList

        tok = lm.tokenizer
        stops = eos_ids(tok)
        pad = tok.pad_token_id if tok.pad_token_id is not None else (stops[0] if stops else 0)
        width = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, ids in enumerate(batch):  # left padding: every prompt ends at the last column
            input_ids[r, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            mask[r, width - len(ids):] = 1
        sample = self.temperature > 0
        gen_cfg = GenerationConfig(max_new_tokens=self.max_new_tokens, do_sample=sample,
                                   temperature=self.temperature if sample else None,
                                   top_p=self.top_p if sample else None, top_k=None,
                                   repetition_penalty=self.repetition_penalty,
                                   eos_token_id=stops or None, pad_token_id=pad)
        device = lm.device if lm.device is not None else next(lm.model.parameters()).device
        guard = [BoxGuard(tok, width, stops)] if self.box_on_stop else []
        seqs = lm.model.generate(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                                 generation_config=gen_cfg, logits_processor=LogitsProcessorList(guard))
        results = []
        for r, row in enumerate(seqs[:, width:].tolist()):
            cut = next((k for k, t in enumerate(row) if t in stops), None)
            if cut is None:
                new, finish, n_new = row, "length", len(row)
            else:
                new, finish, n_new = row[:cut], "stop", cut + 1  # the EOS token counts as generated
            results.append((tok.decode(new, skip_special_tokens=True), finish, n_new,
                            guard[0].forced.get(r, []) if guard else []))
        return results
