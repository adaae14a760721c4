"""A chat client for an OpenAI-compatible endpoint (OpenAI, vLLM, SGLang), standard library only
(docs/sampling.md#openai).

``ChatClient.complete_many(chats)`` posts ``/chat/completions`` requests with at most ``concurrency`` in flight, each
with a ``timeout_s`` socket timeout; 429, 5xx, timeouts, connection errors and unreadable replies are retried
``max_retries`` times with exponential back-off (``backoff_s * 2**attempt``, capped at ``max_backoff_s``, with jitter; a
429's ``Retry-After`` is honoured up to the cap); other 4xx are not retried. A request that still fails comes back as a
``ChatError`` (one line), never as an exception that loses the other requests. Successful replies are stored in an
on-disk cache (``cache_dir``) keyed by the SHA-256 of the request body and the endpoint URL, so a rerun does not pay
twice.

The API key is read from the environment variable named by ``api_key_env`` at the time of a request and is never written
to configs, manifests, logs or the cache; ``api_key_env: null`` sends no key (a local server without authentication).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from ctxbench.files import atomic_write_text
from ctxbench.models.spec import ModelConfig
from ctxbench.part import neutral

log = logging.getLogger(__name__)

RETRY_STATUS = (429, 500, 502, 503, 504)
CACHE_VERSION = 1


def api_key(cfg: ModelConfig) -> str:
    key = os.environ.get(cfg.api_key_env)
    if not key:
        raise RuntimeError(f"model '{cfg.name}': environment variable {cfg.api_key_env} is not set "
                           f"(model.api_key_env names the variable that holds the API key)")
    return key


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


class _Retry(Exception):
    def __init__(self, reason: str, wait: Optional[float] = None, status: Optional[int] = None):
        super().__init__(reason)
        self.wait = wait
        self.status = status


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
    timeout_s: float = neutral(120.0)
    max_retries: int = neutral(5)
    backoff_s: float = neutral(1.0)
    max_backoff_s: float = neutral(60.0)
    concurrency: int = neutral(8)
    cache_dir: Optional[str] = neutral(None)
    extra_body: dict = field(default_factory=dict)
    prepend_reasoning: bool = True

    def check_endpoint(self) -> None:
        """Refuse values that cannot work (ValueError naming the parameter); the key must be in the environment."""
        if not self.base_url or not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url={self.base_url!r} must be an http(s) URL such as http://127.0.0.1:8000/v1")
        if not self.model_name:
            raise ValueError("model_name must name the served model")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s={self.timeout_s} must be positive")
        for name in ("backoff_s", "max_backoff_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 0")
        if self.max_retries < 0:
            raise ValueError(f"max_retries={self.max_retries} must be >= 0")
        if self.concurrency < 1:
            raise ValueError(f"concurrency={self.concurrency} must be >= 1")
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise ValueError(f"api_key_env: environment variable {self.api_key_env} is not set (export it, or "
                             f"api_key_env=null for a server without authentication)")

    def client(self) -> "ChatClient":
        return ChatClient(base_url=self.base_url, model_name=self.model_name, api_key_env=self.api_key_env,
                          timeout_s=self.timeout_s, max_retries=self.max_retries, backoff_s=self.backoff_s,
                          max_backoff_s=self.max_backoff_s, concurrency=self.concurrency, cache_dir=self.cache_dir,
                          extra_body=dict(self.extra_body), prepend_reasoning=self.prepend_reasoning)


class ChatClient:
    """``complete(messages, **params) -> ChatResult`` (raises ChatError) and ``complete_many(chats, **params) ->
    [ChatResult | ChatError]``; ``params`` are request fields (``max_tokens``, ``temperature``, ``seed``, ...)."""

    def __init__(self, base_url: str, model_name: str, *, api_key_env: Optional[str] = "OPENAI_API_KEY",
                 timeout_s: float = 120.0, max_retries: int = 5, backoff_s: float = 1.0, max_backoff_s: float = 60.0,
                 concurrency: int = 8, cache_dir: Optional[str | Path] = None, extra_body: Optional[dict] = None,
                 prepend_reasoning: bool = True):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model_name = model_name
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.concurrency = int(concurrency)
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.extra_body = dict(extra_body or {})
        self.prepend_reasoning = prepend_reasoning
        self._rng = random.Random(0)
        self._lock = threading.Lock()

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
        result = self._post_with_retries(body)
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

    # --- HTTP ----------------------------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise ChatError(f"environment variable {self.api_key_env} is not set (it holds the API key)")
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _wait(self, attempt: int, hint: Optional[float]) -> float:
        with self._lock:
            jitter = self._rng.uniform(0.0, 0.25)
        base = self.backoff_s * (2 ** attempt) * (1.0 + jitter)
        if hint is not None:
            base = max(base, hint)
        return min(base, self.max_backoff_s)

    def _post_with_retries(self, body: dict[str, Any]) -> ChatResult:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = self._headers()
        last: Optional[_Retry] = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                wait = self._wait(attempt - 1, last.wait if last else None)
                log.info("retrying %s in %.2fs (attempt %d/%d): %s", self.url, wait, attempt + 1,
                         self.max_retries + 1, last)
                time.sleep(wait)
            try:
                result = self._post_once(data, headers)
                result.attempts = attempt + 1
                return result
            except _Retry as exc:
                last = exc
        raise ChatError(f"gave up after {self.max_retries + 1} attempts: {last}", status=last.status if last else None,
                        attempts=self.max_retries + 1)

    def _post_once(self, data: bytes, headers: dict[str, str]) -> ChatResult:
        req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            if exc.code in RETRY_STATUS:
                raise _Retry(f"HTTP {exc.code}: {detail}", _retry_after(exc.headers), exc.code) from None
            raise ChatError(f"HTTP {exc.code}: {detail}", status=exc.code) from None
        except (socket.timeout, TimeoutError) as exc:
            raise _Retry(f"timed out after {self.timeout_s:g}s ({exc})") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (socket.timeout, TimeoutError)):
                raise _Retry(f"timed out after {self.timeout_s:g}s") from None
            raise _Retry(f"connection failed: {exc.reason}") from None
        except (ConnectionError, OSError) as exc:
            raise _Retry(f"connection failed: {type(exc).__name__}: {exc}") from None
        try:
            payload = json.loads(raw.decode("utf-8"))
            return self._parse(payload)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise _Retry(f"unreadable reply ({type(exc).__name__}: {exc}): {raw[:80]!r}") from None

    def _parse(self, payload: dict[str, Any]) -> ChatResult:
        choice = payload["choices"][0]
        message = choice["message"]
        content = message.get("content") or ""
        if not isinstance(content, str):
            raise TypeError(f"message.content is a {type(content).__name__}")
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if self.prepend_reasoning and isinstance(reasoning, str) and reasoning.strip():
            content = reasoning.strip() + "\n" + content.lstrip()
        usage = payload.get("usage") or {}
        return ChatResult(text=content, finish_reason=choice.get("finish_reason"),
                          prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"))


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read()
        obj = json.loads(raw.decode("utf-8"))
        err = obj.get("error", obj)
        msg = err.get("message") if isinstance(err, dict) else str(err)
        return str(msg or exc.reason)[:200]
    except Exception:
        return str(exc.reason)[:200]


def _retry_after(headers) -> Optional[float]:
    try:
        value = headers.get("Retry-After") if headers is not None else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


class OpenAIChat:
    """``complete(messages) -> str`` against ``cfg.base_url`` with ``cfg.model_name``; temperature from the config.
    (The ``model`` group's ``openai`` backend; the sampling parts use ``EndpointSettings`` / ``ChatClient``.)"""

    def __init__(self, cfg: ModelConfig):
        if not cfg.base_url or not cfg.model_name:
            raise ValueError(f"model '{cfg.name}': backend=openai needs model.base_url and model.model_name")
        api_key(cfg)  # fail early when the key is missing
        self.cfg = cfg
        self._client = ChatClient(cfg.base_url, cfg.model_name, api_key_env=cfg.api_key_env, timeout_s=cfg.timeout_s)

    def complete(self, messages: list[dict[str, str]], **kwargs: Any) -> str:
        params = {"temperature": self.cfg.temperature, "max_tokens": kwargs.pop("max_tokens", self.cfg.max_new_tokens)}
        params.update(kwargs)
        return self._client.complete(messages, **params).text
