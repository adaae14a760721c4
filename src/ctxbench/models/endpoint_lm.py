"""A served model scored through the OpenAI completions protocol (vLLM, or any server that echoes the prompt's
log-probabilities; docs/usage.md "Explaining a served model").

The black-box methods (perturbation, ContextCite, the controls) and every scorer (faithfulness, recovery, LDS, top-k
drop) need one thing of the model: the log-probabilities of the target's tokens under an edited context. A
completions request with the prompt given as token ids, ``echo=true``, ``logprobs=0`` and ``max_tokens=1`` returns,
in ``choices[i].logprobs.token_logprobs``, log p(token | the tokens before it) for every prompt token (the first is
None): the target is sent at the end of each edited input and its positions read back, so the server does the
forward passes and this project none. The token ids come from the local tokenizer (``model.tokenizer`` names it
for a served model); the first reply of a client is always asked of the server and its echoed tokens checked against
it, so a server serving another vocabulary is refused in one line naming the first position that differs.

The client is the official OpenAI SDK (``openai``) as for the sampling stage's endpoint (``models/openai_client.py``):
the SDK's timeout and retries with that client's back-off between them, at most ``concurrency`` requests in flight
(a progress display per batch of passes), ``prompts_per_request`` edited inputs per
request, and an on-disk cache of the replies (``cache_dir``, keyed by the SHA-256 of the request and the URL) so a
rerun sends nothing twice. The key is read from the variable ``api_key_env`` names (null: no key).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ctxbench.core.errors import ConfigError, DataError
from ctxbench.utils import progress
from ctxbench.utils.files import atomic_write_text

log = logging.getLogger(__name__)


class EndpointLM:
    """``target_logprobs(sequences, n)``: per token-id sequence, log p of its last ``n`` tokens under the served
    model, float64 (N, n). It stands where a loaded model would (``config``, ``device``), so the passes of the
    black-box methods and scorers take it in the model's place (``is_endpoint``)."""

    device = torch.device("cpu")
    dtype = "endpoint"  # what the ablation store records of a model beside its name

    def __init__(self, base_url: str, model_name: str, tokenizer, *, api_key_env: Optional[str] = None,
                 timeout_s: float = 120.0, max_retries: int = 5, concurrency: int = 8, prompts_per_request: int = 8,
                 cache_dir: Optional[str | Path] = None, backoff_s: float = 1.0, max_backoff_s: float = 60.0):
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"model.base_url={base_url!r}: must be an http(s) URL such as http://127.0.0.1:8000/v1")
        if not model_name:
            raise ConfigError("model.model_name: must name the served model")
        self.url = base_url.rstrip("/") + "/completions"
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.concurrency = int(concurrency)
        self.prompts_per_request = int(prompts_per_request)
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.config = SimpleNamespace(_name_or_path=f"{self.url}#{model_name}", model_type="endpoint")
        self.requests = 0  # sent (not read from the cache): what the bench counts
        self.prompts = 0  # the prompts those requests carried (the cost ledger's forward sequences)
        # here, not at import: the passes that only ask ``is_endpoint`` stay light
        from ctxbench.models.openai_client import _Backoff, _SDKClient

        # the key is read when a request is sent (the SDK's callable), never stored
        key = (lambda: os.environ.get(api_key_env, "")) if api_key_env else (lambda: "none")
        self._sdk = _SDKClient(base_url=base_url.rstrip("/"), api_key=key, timeout=float(timeout_s),
                               max_retries=int(max_retries))
        self._sdk.backoff = _Backoff(float(backoff_s), float(max_backoff_s))  # the sampling client's waits
        self._checked = False

    # --- the one thing the passes ask -------------------------------------------------------------------------------

    def target_logprobs(self, sequences: Sequence[Sequence[int]], n: int) -> np.ndarray:
        seqs = [[int(t) for t in s] for s in sequences]
        if any(len(s) <= n for s in seqs):
            raise ValueError(f"every sequence needs a context before its last {n} tokens")
        chunks = [seqs[i:i + self.prompts_per_request] for i in range(0, len(seqs), self.prompts_per_request)]
        if not self._checked and chunks:  # the first request alone: a wrong server fails before the others go out
            first = self._logprobs(chunks[0])
            rest = chunks[1:]
        else:
            first, rest = [], chunks
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool, \
                progress.bar(len(seqs), "endpoint passes", "seq") as shown:
            shown.update(len(first))
            replies = list(first)
            for got in pool.map(self._logprobs, rest):
                replies += got
                shown.update(len(got))
        return np.array([lp[len(s) - n:] for s, lp in zip(seqs, replies)], dtype=np.float64)

    def check(self) -> None:
        """One request before any example: the server answers, serves ``model_name`` and returns prompt
        log-probabilities in the local tokenizer's tokens; else one line (the stage's exit 2)."""
        ids = self.tokenizer("The quick brown fox jumps over the lazy dog.", add_special_tokens=False)["input_ids"]
        self._logprobs([ids])

    # --- requests ---------------------------------------------------------------------------------------------------

    def _logprobs(self, prompts: list[list[int]]) -> list[list[float]]:
        # max_tokens=1 as the servers' own echo examples send it (0 is not accepted everywhere); the generated
        # token is ignored
        body = {"model": self.model_name, "prompt": prompts, "max_tokens": 1, "temperature": 0.0, "echo": True,
                "logprobs": 0}
        key = hashlib.sha256(json.dumps({"url": self.url, "body": body}, sort_keys=True).encode()).hexdigest()
        path = self.cache_dir / key[:2] / f"{key}.json" if self.cache_dir else None
        if path is not None and path.is_file() and self._checked:  # the check is always asked of the server
            return json.loads(path.read_text(encoding="utf-8"))
        import openai

        try:
            reply = self._sdk.completions.create(**body)
        except openai.NotFoundError as exc:
            raise DataError(f"model.model_name={self.model_name!r}: the server does not serve it ({_reason(exc)})",
                            file=self.url) from None
        except openai.APIError as exc:
            raise DataError(f"the endpoint refused the scoring request: {_reason(exc)}", file=self.url) from None
        self.requests += 1
        self.prompts += len(prompts)
        out = [self._read(choice, prompts[choice.index]) for choice in sorted(reply.choices, key=lambda c: c.index)]
        if len(out) != len(prompts):
            raise DataError(f"{len(out)} completions for {len(prompts)} prompts", file=self.url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(out))
        return out

    def _read(self, choice: Any, prompt: list[int]) -> list[float]:
        lp = getattr(choice, "logprobs", None)
        values = list(getattr(lp, "token_logprobs", None) or [])
        if len(values) < len(prompt) or any(v is None for v in values[1:len(prompt)]):
            raise DataError("the endpoint returned no log-probabilities of the prompt's tokens (it needs echo=true "
                            "with logprobs, as vLLM gives them)", file=self.url)
        if not self._checked:
            self._check_tokens(list(getattr(lp, "tokens", None) or []), prompt)
            self._checked = True
        return [float("nan")] + [float(v) for v in values[1:len(prompt)]]

    def _check_tokens(self, echoed: list[str], prompt: list[int]) -> None:
        """The server's tokens of the prompt are the local tokenizer's: else the spans would name other text."""
        ours = [self.tokenizer.decode([t]) for t in prompt]
        for i, (a, b) in enumerate(zip(echoed, ours)):
            if a != b:
                raise DataError(f"the server's token {i} is {a!r}, the local tokenizer's {b!r}: model.tokenizer must "
                                f"be the served model's", file=self.url)


def is_endpoint(model) -> bool:
    return isinstance(model, EndpointLM)


def _reason(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]
