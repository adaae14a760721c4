"""Judges (the ``judge`` config group): does the boxed answer match the reference answer? (docs/sampling.md#judges)

One interface, ``Judge.judge(items) -> verdicts`` (one per item, in order); a judge that runs the local model receives
it through ``use_lm(loaded_lm)``. Options:

- ``rule`` (offline default, ``RuleJudge``): normalised exact match or containment of the normalised reference in the
  answer, token-wise, numbers compared by value;
- ``model`` (``ModelJudge``): FlashTrace's judge prompts on a local causal LM (greedy, a few tokens), parsed by
  FlashTrace's rule;
- ``openai`` (``OpenAIJudge``): the same prompts through an OpenAI-compatible endpoint.
"""

from __future__ import annotations

import math
import re
import unicodedata
from abc import ABC, abstractmethod
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar, Optional

from ctxbench.core.errors import ConfigError
from ctxbench.generators.base import GenerationRequest
from ctxbench.models.openai_client import ChatError, EndpointSettings
from ctxbench.models.spec import ModelConfig
from ctxbench.core.part import Part, neutral, param
from ctxbench.sampling.prompts import judge_messages, parse_judge_response


@dataclass(frozen=True)
class JudgeItem:
    boxed_answer: str
    reference_answer: str
    question: str = ""


@dataclass(frozen=True)
class Verdict:
    """``correct``; ``response``: what the judge said (the model's reply, or the rule that decided); ``error``: None, or
    why no verdict could be had (then ``correct`` is False)."""

    correct: bool
    response: str
    error: Optional[str] = None


class Judge(Part, ABC):
    """Subclasses are dataclasses (their fields are the parameters) with a ``name``."""

    name: ClassVar[str] = ""

    @abstractmethod
    def judge(self, items: list[JudgeItem]) -> list[Verdict]:
        """One Verdict per item, in order."""


# --- rule -----------------------------------------------------------------------------------------------------------

ARTICLES = frozenset({"a", "an", "the"})
_APOSTROPHES = re.compile(r"['’‘`´]")
_TOKEN = re.compile(r"(?P<num>(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\w))|(?P<word>[^\W_]+)")


def _canonical_number(text: str) -> Optional[str]:
    try:
        d = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None
    if d == d.to_integral_value():
        return str(int(d))
    return format(d.normalize(), "f")


def normalize_answer(text: str, *, numbers: bool = True) -> list[str]:
    """The tokens an answer is compared by: Unicode NFKC (full-width forms become ASCII), lower case, apostrophes
    removed, every other punctuation or symbol character a separator, the articles a/an/the dropped; with ``numbers``,
    a number ("1,000", "3.0", "-2.50") becomes its canonical decimal ("1000", "3", "-2.5")."""
    text = unicodedata.normalize("NFKC", text or "").lower().replace("\u2212", "-")
    text = _APOSTROPHES.sub("", text)
    out = []
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if m.group("num") is not None:
            if not numbers:  # plain text: "1,000" is the words "1" and "000"
                out.extend(re.findall(r"[^\W_]+", tok))
                continue
            tok = _canonical_number(tok) or tok
        if tok in ARTICLES:
            continue
        out.append(tok)
    return out


def _is_number(tok: str) -> bool:
    return bool(re.fullmatch(r"-?\d+(?:\.\d+)?", tok))


@dataclass
class RuleJudge(Judge):
    """Offline judge. The answer and the reference are normalised (``normalize_answer``); the answer is correct when
    the token lists are equal (``exact``) or, with ``containment``, when the reference's tokens occur as a contiguous
    run inside the answer's (``contains``: the box holds a whole sentence). With ``numbers``, numeric tokens are equal
    when their values agree within the relative tolerance ``rel_tol``."""

    name: ClassVar[str] = "rule"
    containment: bool = True
    numbers: bool = True
    rel_tol: float = param(1e-9, ge=0, lt=1)

    def _same(self, a: str, b: str) -> bool:
        if a == b:
            return True
        if self.numbers and _is_number(a) and _is_number(b):
            return math.isclose(float(a), float(b), rel_tol=self.rel_tol, abs_tol=0.0)
        return False

    def match(self, answer: str, reference: str) -> Optional[str]:
        """The rule that accepts ``answer`` for ``reference`` (``exact`` or ``contains``), None if none does."""
        a = normalize_answer(answer, numbers=self.numbers)
        r = normalize_answer(reference, numbers=self.numbers)
        if not r or not a:
            return None
        if len(a) == len(r) and all(self._same(x, y) for x, y in zip(a, r)):
            return "exact"
        if self.containment:
            for s in range(len(a) - len(r) + 1):
                if all(self._same(a[s + k], r[k]) for k in range(len(r))):
                    return "contains"
        return None

    def judge(self, items: list[JudgeItem]) -> list[Verdict]:
        out = []
        for it in items:
            rule = self.match(it.boxed_answer, it.reference_answer)
            out.append(Verdict(rule is not None, f"True ({rule})" if rule else "False (no match)"))
        return out


# --- model ----------------------------------------------------------------------------------------------------------

@dataclass
class ModelJudge(Judge):
    """FlashTrace's judge prompts on a local causal LM, greedy, ``max_new_tokens`` tokens, ``batch_size`` at a time.

    ``path`` null (default): the model of the ``model`` group, handed over by the stage (``use_lm``). Otherwise the
    judge loads a model of its own on first use, ``path`` (hub id, folder, ``.gguf`` file or ``pypkg:<package>``) with
    ``gguf_file``, ``revision``, ``dtype``, ``device``, ``device_map``, ``trust_remote_code`` as in the ``model`` group,
    and ``cache_dir`` as the model cache. ``enable_thinking``: passed to chat templates that read it (Qwen3); False
    keeps the reply short. (Flat keys rather than a nested model config: a null nested structured node cannot be
    overridden from the command line, ``judge.path=Qwen/Qwen3-8B`` can.)"""

    name: ClassVar[str] = "model"
    path: Optional[str] = None
    gguf_file: Optional[str] = None
    revision: Optional[str] = None
    dtype: str = "auto"
    device: str = "auto"
    device_map: Optional[str] = None
    trust_remote_code: bool = False
    cache_dir: Optional[str] = neutral(None)
    max_new_tokens: int = param(8, ge=1)
    batch_size: int = neutral(8, ge=1)
    enable_thinking: Optional[bool] = False

    def __post_init__(self):
        from ctxbench.generators.hf import HFGenerator

        self._gen = HFGenerator(batch_size=self.batch_size, max_new_tokens=self.max_new_tokens, temperature=0.0,
                                enable_thinking=self.enable_thinking)
        self._bound = False

    @property
    def needs_lm(self) -> bool:  # type: ignore[override]
        return self.path is None

    def model_config(self) -> Optional[ModelConfig]:
        """The judge's own model, None when it uses the bound model of the ``model`` group."""
        if self.path is None:
            return None
        return ModelConfig(name="judge", backend="hf", path=self.path, gguf_file=self.gguf_file, revision=self.revision,
                           dtype=self.dtype, device=self.device, device_map=self.device_map,
                           trust_remote_code=self.trust_remote_code)

    def use_lm(self, loaded_lm: Any) -> None:
        """Use the model of the ``model`` group (when ``path`` is null); with none (an endpoint model) that is a
        ConfigError, raised here, before any generation."""
        if self.path is not None:
            return
        if loaded_lm is None:
            raise ConfigError("judge: judge=model with judge.path=null judges with the local model of the `model` "
                              "group, and there is none (model.backend is not hf); set judge.path or use judge=openai")
        self._gen.use_lm(loaded_lm)
        self._bound = True

    def _ensure_model(self) -> None:
        if self._bound:
            return
        if self.path is None:
            raise RuntimeError("judge model: no model handed over and no judge.path (use_lm the local model of the "
                               "`model` group, or set judge.path)")
        from ctxbench.models import load_causal_lm

        self._gen.use_lm(load_causal_lm(self.model_config(), cache_dir=self.cache_dir))
        self._bound = True

    def judge(self, items: list[JudgeItem]) -> list[Verdict]:
        if not items:
            return []
        self._ensure_model()
        reqs = [GenerationRequest(str(i), judge_messages(it.reference_answer, it.boxed_answer))
                for i, it in enumerate(items)]
        out = []
        for g in self._gen.generate(reqs):
            if g.error:
                out.append(Verdict(False, "", error=g.error))
            else:
                out.append(Verdict(parse_judge_response(g.text), g.text))
        return out


# --- openai ---------------------------------------------------------------------------------------------------------

@dataclass(kw_only=True)
class OpenAIJudge(EndpointSettings, Judge):
    """FlashTrace's judge prompts through an OpenAI-compatible endpoint (``EndpointSettings``), ``temperature`` 0,
    ``max_tokens`` per reply."""

    name: ClassVar[str] = "openai"
    max_tokens: int = param(16, ge=1)
    temperature: float = param(0.0, ge=0)

    def __post_init__(self):
        self.check_endpoint()
        self._client = self.client()

    def judge(self, items: list[JudgeItem]) -> list[Verdict]:
        chats = [judge_messages(it.reference_answer, it.boxed_answer) for it in items]
        out = []
        for res in self._client.complete_many(chats, max_tokens=self.max_tokens, temperature=self.temperature):
            if isinstance(res, ChatError):
                out.append(Verdict(False, "", error=str(res)))
            else:
                out.append(Verdict(parse_judge_response(res.text), res.text))
        return out

