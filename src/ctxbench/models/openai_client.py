"""A chat client for an OpenAI-compatible endpoint (OpenAI, vLLM, SGLang) on the official OpenAI Python SDK
(``openai``, https://github.com/openai/openai-python; docs/sampling.md#openai).

The SDK owns the HTTP: the request, the ``timeout_s`` timeout, and the retries (``max_retries``) of 408, 409, 429, 5xx,
timeouts and connection errors, with its error classes (``openai.RateLimitError``, ``APIStatusError``,
``APITimeoutError``, ``APIConnectionError``, ...). What is left here is what the SDK does not do: the wait between
retries follows ``backoff_s`` / ``max_backoff_s``; a reply that arrives (HTTP 200) but is not a chat completion is asked
again within the same ``max_retries``, since the SDK's retries end with the status code; ``complete_many`` sends at most
``concurrency`` requests at once and turns each failure into a one-line ``ChatError`` instead of an exception that loses
the other requests; successful replies are stored in an on-disk cache (``cache_dir``) keyed by the SHA-256 of the
request body and the endpoint URL, so a rerun does not pay twice.

The API key is read from the environment variable named by ``api_key_env`` when a request is sent (the SDK's callable
``api_key``) and is never written to configs, manifests, logs or the cache; ``api_key_env: null`` sends no key (a local
server without authentication).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import openai

from ctxbench.utils.files import atomic_write_text
from ctxbench.core.part import neutral, refuse

log = logging.getLogger(__name__)

CACHE_VERSION = 1


@dataclass
class ChatResult:
    text: str
    finish_reason: Optional[str] = None
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    cached: bool = False
    attempts: int = 1


class ChatError(RuntimeError):
    """A request that failed for good; the message is one line (status and the server's reason)."""

    def __init__(self, message: str, *, status: Optional[int] = None, attempts: int = 1):
        super().__init__(" ".join(str(message).split())[:300])
        self.status = status
        self.attempts = attempts


@dataclass(kw_only=True)
class EndpointSettings:
    """The settings of an OpenAI-compatible endpoint, shared by the ``openai`` generator and judge.

    ``base_url`` (``.../v1``), ``model_name``, ``api_key_env`` (the variable holding the key; null: no key),
    ``timeout_s`` per request, ``max_retries`` after the first try, ``backoff_s`` / ``max_backoff_s`` (retry waits),
    ``concurrency`` (requests in flight), ``cache_dir`` (the response cache; null: no cache), ``extra_body`` (more
    request fields, e.g. ``{chat_template_kwargs: {enable_thinking: false}}`` for vLLM), ``prepend_reasoning``
    (a reply's separate ``reasoning_content`` goes before its ``content``, joined by a newline).
    """

    base_url: str = "https://api.openai.com/v1"
    model_name: str = "gpt-4o-mini"
    api_key_env: Optional[str] = neutral("OPENAI_API_KEY")
    timeout_s: float = neutral(120.0, gt=0)
    max_retries: int = neutral(5, ge=0)
    backoff_s: float = neutral(1.0, ge=0)
    max_backoff_s: float = neutral(60.0, ge=0)
    concurrency: int = neutral(8, ge=1)
    cache_dir: Optional[str] = neutral(None)
    extra_body: dict = field(default_factory=dict)
    prepend_reasoning: bool = True

    def check_endpoint(self) -> None:
        """What the declared bounds cannot say: an http(s) URL, a model name, the key in the environment."""
        if not self.base_url or not self.base_url.startswith(("http://", "https://")):
            raise refuse("base_url", self.base_url, "must be an http(s) URL such as http://127.0.0.1:8000/v1")
        if not self.model_name:
            raise refuse("model_name", self.model_name, "must name the served model")
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise refuse("api_key_env", self.api_key_env, "the environment variable is not set (export it, or "
                         "api_key_env=null for a server without authentication)")

    def client(self) -> "ChatClient":
        return ChatClient(base_url=self.base_url, model_name=self.model_name, api_key_env=self.api_key_env,
                          timeout_s=self.timeout_s, max_retries=self.max_retries, backoff_s=self.backoff_s,
                          max_backoff_s=self.max_backoff_s, concurrency=self.concurrency, cache_dir=self.cache_dir,
                          extra_body=dict(self.extra_body), prepend_reasoning=self.prepend_reasoning)


class _Backoff:
    """Retry ``k`` (0-based) waits ``backoff_s * 2**k`` plus up to 25 % jitter, at least the server's ``Retry-After``,
    at most ``max_backoff_s``. The jitter comes from a seeded generator: the same failures, the same waits."""

    def __init__(self, backoff_s: float, max_backoff_s: float):
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._rng = random.Random(0)

    def wait(self, retry: int, retry_after: Optional[float] = None) -> float:
        base = self.backoff_s * (2 ** retry) * (1.0 + self._rng.uniform(0.0, 0.25))
        if retry_after is not None and retry_after > 0:
            base = max(base, retry_after)
        return min(base, self.max_backoff_s)


class _SDKClient(openai.OpenAI):
    """The SDK's client with this endpoint's waits between retries. The SDK still decides what is retried and how
    often; ``_calculate_retry_timeout`` is the SDK's hook for the wait (its own is 0.5 s doubling up to 8 s)."""

    backoff: _Backoff
    retries_before = 0  # tries already spent on this request by an earlier call (a copy made after an unreadable reply)

    def _calculate_retry_timeout(self, remaining_retries: int, options: Any, response_headers: Any = None) -> float:
        retry = self.retries_before + max(self.max_retries - remaining_retries, 0)
        return self.backoff.wait(retry, self._parse_retry_after_header(response_headers))


class ChatClient:
    """``complete(messages, **params) -> ChatResult`` (raises ChatError) and ``complete_many(chats, **params) ->
    [ChatResult | ChatError]``; ``params`` are request fields (``max_tokens``, ``temperature``, ``seed``, ...)."""

    def __init__(self, base_url: str, model_name: str, *, api_key_env: Optional[str] = "OPENAI_API_KEY",
                 timeout_s: float = 120.0, max_retries: int = 5, backoff_s: float = 1.0, max_backoff_s: float = 60.0,
                 concurrency: int = 8, cache_dir: Optional[str | Path] = None, extra_body: Optional[dict] = None,
                 prepend_reasoning: bool = True):
        self.url = base_url.rstrip("/") + "/chat/completions"  # part of the cache key
        self.model_name = model_name
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.concurrency = int(concurrency)
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.extra_body = dict(extra_body or {})
        self.prepend_reasoning = prepend_reasoning
        self._backoff = _Backoff(float(backoff_s), float(max_backoff_s))
        self._sdk = _SDKClient(base_url=base_url.rstrip("/"), api_key=self._key, timeout=self.timeout_s,
                               max_retries=self.max_retries)
        self._sdk.backoff = self._backoff
        # the SDK's HTTP library (httpx2) logs every request at INFO: thousands of lines in a job's log; kept at
        # WARNING unless configured otherwise (e.g. hydra.job_logging.loggers)
        transport_log = logging.getLogger("httpx2")
        if transport_log.level == logging.NOTSET:
            transport_log.setLevel(logging.WARNING)
        # no key: the SDK's Authorization header is left out of every request (its documented ``Omit``)
        self._headers = {} if api_key_env else {"Authorization": openai.omit}

    def _key(self) -> str:
        """The SDK's ``api_key`` callable, called before every request and retry."""
        if not self.api_key_env:
            return ""
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ChatError(f"environment variable {self.api_key_env} is not set (it holds the API key)")
        return key

    # --- one request ---------------------------------------------------------------------------------------------

    def body(self, messages: list, **params: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model_name, "messages": [dict(m) for m in messages]}
        body.update(self.extra_body)
        body.update({k: v for k, v in params.items() if v is not None})
        return body

    def cache_key(self, body: dict[str, Any]) -> str:
        blob = json.dumps({"v": CACHE_VERSION, "url": self.url, "body": body}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def _cache_path(self, key: str) -> Optional[Path]:
        return self.cache_dir / key[:2] / f"{key}.json" if self.cache_dir else None

    def complete(self, messages: list, **params: Any) -> ChatResult:
        body = self.body(messages, **params)
        key = self.cache_key(body)
        path = self._cache_path(key)
        if path is not None and path.is_file():
            try:
                hit = json.loads(path.read_text(encoding="utf-8"))
                return ChatResult(**{**hit["result"], "cached": True, "attempts": 0})
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("unreadable cache entry %s: asking the endpoint again", path)
        result = self._ask(body)
        if path is not None:
            entry = {"request": body, "result": {k: v for k, v in vars(result).items()
                                                 if k not in ("cached", "attempts")}}
            atomic_write_text(path, json.dumps(entry, ensure_ascii=False))
        return result

    def complete_many(self, chats: list[list], **params: Any) -> list[Union[ChatResult, ChatError]]:
        def one(messages):
            try:
                return self.complete(messages, **params)
            except ChatError as exc:
                return exc
            except Exception as exc:  # never lose the other requests
                return ChatError(f"{type(exc).__name__}: {exc}")

        if not chats:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(chats))) as pool:
            return list(pool.map(one, chats))

    # --- through the SDK -----------------------------------------------------------------------------------------

    def _ask(self, body: dict[str, Any]) -> ChatResult:
        """One request through the SDK (which retries transport and status failures); a reply that is not a chat
        completion is asked again while attempts are left, after the same back-off."""
        fields = {k: v for k, v in body.items() if k not in ("model", "messages")}
        sdk = self._sdk
        spent = 0
        while True:
            try:
                raw = sdk.chat.completions.with_raw_response.create(model=body["model"], messages=body["messages"],
                                                                    extra_body=fields, extra_headers=self._headers)
            except openai.APIError as exc:
                raise self._failure(exc, spent) from None
            spent += raw.retries_taken + 1
            try:
                result = self._parse(raw.parse())
                result.attempts = spent
                return result
            except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
                reason = f"unreadable reply ({type(exc).__name__}: {exc}): {raw.http_response.content[:80]!r}"
            left = self.max_retries - (spent - 1)
            if left <= 0:
                raise ChatError(f"gave up after {spent} attempts: {reason}", attempts=spent)
            wait = self._backoff.wait(spent - 1)
            log.info("retrying %s in %.2fs (attempt %d/%d): %s", self.url, wait, spent + 1, self.max_retries + 1,
                     reason)
            time.sleep(wait)
            sdk = self._sdk.with_options(max_retries=left - 1)  # the rest of this request's retries
            sdk.backoff, sdk.retries_before = self._backoff, spent

    def _failure(self, exc: openai.APIError, spent: int) -> ChatError:
        """The SDK's error as one line: ``[gave up after N attempts: ]HTTP <status>: <server message>``, ``timed out``
        or ``connection failed``."""
        attempts = spent + _attempts(exc.request)
        status = None
        if isinstance(exc, openai.APITimeoutError):
            reason = f"timed out after {self.timeout_s:g}s"
        elif isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            reason = f"connection failed: {type(cause).__name__}: {cause}" if cause else "connection failed"
        elif isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            reason = f"HTTP {status}: {_server_message(exc)}"
        else:
            reason = f"{type(exc).__name__}: {exc.message}"
        prefix = f"gave up after {attempts} attempts: " if attempts > 1 else ""
        return ChatError(prefix + reason, status=status, attempts=attempts)

    def _parse(self, completion: Any) -> ChatResult:
        """The SDK's ``ChatCompletion``; a server's extra fields (vLLM's ``reasoning_content``) are kept by its
        models as attributes."""
        choice = completion.choices[0]
        message = choice.message
        content = message.content or ""
        if not isinstance(content, str):
            raise TypeError(f"message.content is a {type(content).__name__}")
        reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
        if self.prepend_reasoning and isinstance(reasoning, str) and reasoning.strip():
            content = reasoning.strip() + "\n" + content.lstrip()
        usage = completion.usage
        return ChatResult(text=content, finish_reason=choice.finish_reason,
                          prompt_tokens=getattr(usage, "prompt_tokens", None),
                          completion_tokens=getattr(usage, "completion_tokens", None))


def _attempts(request: Any) -> int:
    """How many times the SDK sent the request: it numbers its retries in the ``x-stainless-retry-count`` header."""
    try:
        return int(request.headers.get("x-stainless-retry-count", 0)) + 1
    except (AttributeError, TypeError, ValueError):
        return 1


def _server_message(exc: openai.APIStatusError) -> str:
    """The server's ``error.message`` (the SDK keeps the ``error`` object as ``body``), else the HTTP reason."""
    body = exc.body
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.response.reason_phrase or exc.message)[:200]
