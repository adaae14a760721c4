"""In-context example templates (OpenCompass / AISBench ``openicl`` contract; docs/retrievers.md).

An ``ICLTemplate`` renders a test row and the pool rows a retriever chose for it:

- ``ice_template`` renders one in-context example from a pool row, answer included: a string with ``{field}``
  placeholders, or a dialogue ``{begin, round: [{role: HUMAN|BOT|SYSTEM, prompt}], end}`` of which only ``round`` is
  rendered for an example. String examples are joined with ``ice_separator`` ("\\n") and followed by ``ice_eos_token``
  ("\\n"); dialogue examples are turns (both are ""). No examples: the in-context block is empty.
- ``prompt_template`` renders the test row; ``ice_token`` (e.g. ``</E>``) marks where the examples go; the test row's
  ``answer_field`` is blanked. Without a ``prompt_template`` the ``ice_template`` is the prompt template and must
  contain the ``ice_token``. Neither given: refused.
- Unknown ``{placeholders}`` are left as they are. Placeholders are filled in one pass, before the examples are put in,
  so text inside a row or an example is never substituted again (OpenCompass formats the examples' text with the
  test row too).

``render`` gives a ``RenderedPrompt``: its ``text`` is what a model without a chat template reads (a dialogue's
non-empty parts joined by "\\n"; no stray leading "\\n" when there are no examples, unlike OpenCompass) and
``messages()`` the chat messages: HUMAN -> user, BOT -> assistant, SYSTEM -> system (or its ``fallback_role``, default
HUMAN, when the model has no system role), free text of ``begin``/``end`` -> user, consecutive messages of one role
merged with "\\n"; a string prompt is one user message, so few-shot with chat models means a dialogue template (examples
as alternating user/assistant turns). In generation the final BOT turn is left open: dropped when empty (the chat
template adds the generation prompt), otherwise continued. ``for_model(tokenizer)`` picks the form the model reads and,
for chat models, the text the tokenizer's chat template makes.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

from ctxbench.utils.tokens import has_chat_template

HUMAN, BOT, SYSTEM = "HUMAN", "BOT", "SYSTEM"
ROLES = (HUMAN, BOT, SYSTEM)
CHAT_ROLE = {HUMAN: "user", BOT: "assistant", SYSTEM: "system", None: "user"}
DIALOGUE_KEYS = ("begin", "round", "end")

# The sampling stage's system prompt (FlashTrace's sample_and_filter.py), verbatim.
BOX_SYSTEM_PROMPT = (
    "You are a reasoning assistant. Before answering, engage in an chain of thought. Process this freely and naturally "
    "without using specific headers or strict formatting. When you reach the conclusion, wrap the entire final "
    "sentence containing the answer inside \\box{}. Ensure the box wraps the **sentence** that naturally delivers the "
    "answer. DO NOT rewrite the answer word for the box separately.")

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def fill(text: str, row: Mapping[str, Any]) -> str:
    """Replace each ``{name}`` whose name is a key of ``row`` by its value (None -> ""); leave the others."""
    def sub(m: re.Match) -> str:
        if m.group(1) not in row:
            return m.group(0)
        v = row[m.group(1)]
        return "" if v is None else str(v)

    return _PLACEHOLDER.sub(sub, text)


@dataclass
class Segment:
    """One part of a rendered dialogue: a turn (``role`` HUMAN | BOT | SYSTEM) or free text (``role`` None)."""

    role: Optional[str]
    text: str
    fallback_role: Optional[str] = None


@dataclass
class ModelPrompt:
    """What a model is sent: ``messages`` (chat models; None otherwise) and ``text`` (the chat template's output for
    chat models, the plain prompt otherwise)."""

    text: str
    messages: Optional[list[dict[str, str]]]
    add_generation_prompt: bool = True
    continue_final_message: bool = False

    @property
    def chat(self) -> bool:
        return self.messages is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RenderedPrompt:
    """A rendered test prompt (module doc): ``segments`` for dialogue templates, ``plain`` for string templates."""

    dialogue: bool
    segments: list[Segment] = field(default_factory=list)
    plain: str = ""
    n_examples: int = 0

    @property
    def text(self) -> str:
        if not self.dialogue:
            return self.plain
        return "\n".join(s.text for s in self.segments if s.text)

    def messages(self, system_role: bool = True) -> tuple[list[dict[str, str]], bool]:
        """``(messages, open_turn)``: chat messages, and whether the last one is an assistant turn to continue."""
        if not self.dialogue:
            return [{"role": "user", "content": self.plain}], False
        segs = list(self.segments)
        open_turn = False
        if segs and segs[-1].role == BOT:  # the answer turn of the test row: left open
            if segs[-1].text:
                open_turn = True
            else:
                segs = segs[:-1]
        msgs: list[dict[str, str]] = []
        for s in segs:
            if not s.text:
                continue
            role = s.role
            if role == SYSTEM and not system_role:
                role = s.fallback_role or HUMAN
            chat_role = CHAT_ROLE[role]
            if msgs and msgs[-1]["role"] == chat_role:
                msgs[-1]["content"] += "\n" + s.text
            else:
                msgs.append({"role": chat_role, "content": s.text})
        return msgs, open_turn

    def for_model(self, tokenizer=None, system_role: Optional[bool] = None) -> ModelPrompt:
        """The chat form when ``tokenizer`` has a chat template, the plain text otherwise. ``system_role`` None:
        probe the tokenizer's template."""
        if not has_chat_template(tokenizer):
            return ModelPrompt(text=self.text, messages=None)
        if system_role is None:
            system_role = chat_supports_system(tokenizer)
        msgs, open_turn = self.messages(system_role=system_role)
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=not open_turn,
                                             continue_final_message=open_turn, enable_thinking=False)
        return ModelPrompt(text=text, messages=msgs, add_generation_prompt=not open_turn,
                           continue_final_message=open_turn)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_SYSTEM_PROBE: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()


def chat_supports_system(tokenizer) -> bool:
    """Whether the tokenizer's chat template renders a system message (some raise or drop it); probed once per
    tokenizer."""
    try:
        return _SYSTEM_PROBE[tokenizer]
    except (KeyError, TypeError):
        pass
    marker = "\x1fsystem-probe\x1f"
    try:
        out = tokenizer.apply_chat_template([{"role": "system", "content": marker},
                                             {"role": "user", "content": "hi"}], tokenize=False)
        ok = marker in out
    except Exception:  # a template that refuses the role raises (a jinja exception)
        ok = False
    try:
        _SYSTEM_PROBE[tokenizer] = ok
    except TypeError:  # not weak-referenceable: probe every time
        pass
    return ok


# --- template checks ---------------------------------------------------------------------------------------------

Template = Union[str, dict, None]


def _plain(x: Any) -> Any:
    """OmegaConf containers as plain Python (templates may arrive from a config)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(x, (DictConfig, ListConfig)):
            return OmegaConf.to_container(x, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return x


def _check_turn(turn: Any, where: str) -> dict:
    if not isinstance(turn, Mapping):
        raise ValueError(f"{where}: expected a turn {{role, prompt}} or a string, got {turn!r}")
    extra = set(turn) - {"role", "prompt", "fallback_role"}
    if extra:
        raise ValueError(f"{where}: unknown key(s) {sorted(extra)} (a turn has role, prompt, fallback_role)")
    if turn.get("role") not in ROLES:
        raise ValueError(f"{where}.role={turn.get('role')!r}: expected one of {', '.join(ROLES)}")
    if turn.get("fallback_role") not in (None, *ROLES):
        raise ValueError(f"{where}.fallback_role={turn.get('fallback_role')!r}: expected one of {', '.join(ROLES)}")
    if not isinstance(turn.get("prompt", ""), str):
        raise ValueError(f"{where}.prompt: expected a string")
    return {"role": turn["role"], "prompt": turn.get("prompt", ""), "fallback_role": turn.get("fallback_role")}


def _check_items(items: Any, where: str, turns_only: bool = False) -> list:
    if items is None:
        return []
    if isinstance(items, (str, Mapping)):
        items = [items]
    if not isinstance(items, list):
        raise ValueError(f"{where}: expected a string, a turn or a list of them")
    out = []
    for i, it in enumerate(items):
        if isinstance(it, str) and not turns_only:
            out.append(it)
        else:
            out.append(_check_turn(it, f"{where}[{i}]"))
    return out


def check_template(t: Any, name: str) -> Template:
    """A string, or a dialogue normalised to ``{begin: [...], round: [...], end: [...]}``; a ValueError names
    ``name``."""
    t = _plain(t)
    if t is None or isinstance(t, str):
        return t
    if not isinstance(t, Mapping):
        raise ValueError(f"{name}: expected a string or a dialogue {{begin, round, end}}, got {type(t).__name__}")
    extra = set(t) - set(DIALOGUE_KEYS)
    if extra:
        raise ValueError(f"{name}: unknown key(s) {sorted(extra)}; a dialogue template has begin, round, end "
                         f"(label-keyed templates for perplexity scoring are not supported)")
    if not t.get("round"):
        raise ValueError(f"{name}.round: a dialogue template needs a non-empty round of turns")
    return {"begin": _check_items(t.get("begin"), f"{name}.begin"),
            "round": _check_items(t["round"], f"{name}.round", turns_only=True),
            "end": _check_items(t.get("end"), f"{name}.end")}


def _strings_of(t: Template) -> list[str]:
    if t is None:
        return []
    if isinstance(t, str):
        return [t]
    return [it if isinstance(it, str) else it["prompt"] for key in DIALOGUE_KEYS for it in t[key]]


def _token_in_turn(t: Template, token: str) -> bool:
    return isinstance(t, dict) and any(isinstance(it, dict) and token in it["prompt"]
                                       for key in DIALOGUE_KEYS for it in t[key])


@dataclass
class ICLTemplate:
    """The templates of a few-shot prompt (module doc). ``answer_field``: the row field holding the answer (the
    ``output_column`` of OpenCompass), blanked in the test row."""

    ice_template: Any = None
    prompt_template: Any = None
    ice_token: Optional[str] = None
    ice_separator: str = "\n"
    ice_eos_token: str = "\n"
    answer_field: str = "answer"

    def __post_init__(self) -> None:
        self.ice_template = check_template(self.ice_template, "ice_template")
        self.prompt_template = check_template(self.prompt_template, "prompt_template")
        if self.ice_template is None and self.prompt_template is None:
            raise ValueError("ice_template / prompt_template: give at least one (neither is set)")
        if self.ice_token == "":
            raise ValueError("ice_token: must be null or a non-empty marker such as </E>")
        if not self.answer_field:
            raise ValueError("answer_field: must name the rows' answer field")
        if self.ice_template is not None:
            prompt = self.prompt_template if self.prompt_template is not None else self.ice_template
            which = "prompt_template" if self.prompt_template is not None else "ice_template (used as the prompt)"
            if self.ice_token is None or not any(self.ice_token in s for s in _strings_of(prompt)):
                raise ValueError(f"ice_token: {which} must contain the ice_token ({self.ice_token!r}) to place the "
                                 f"in-context examples")
            if isinstance(self.ice_template, dict):
                if isinstance(prompt, str):
                    raise ValueError("prompt_template: a dialogue ice_template needs a dialogue prompt_template")
                if _token_in_turn(prompt, self.ice_token):
                    raise ValueError(f"prompt_template: with a dialogue ice_template the ice_token "
                                     f"{self.ice_token!r} must be an item of begin/round/end, not inside a turn's text")

    @property
    def dialogue(self) -> bool:
        return isinstance(self._prompt(), dict)

    def _prompt(self) -> Template:
        return self.prompt_template if self.prompt_template is not None else self.ice_template

    # --- rendering -----------------------------------------------------------------------------------------------

    def _strip_token(self, text: str) -> str:
        return text.replace(self.ice_token, "") if self.ice_token else text

    def render_ice(self, examples: Sequence[Mapping[str, Any]]) -> Union[str, list[Segment]]:
        """The in-context block: a string (string ``ice_template``) or turns (dialogue); empty for no examples."""
        examples = list(examples)
        if examples and self.ice_template is None:
            raise ValueError(f"{len(examples)} in-context example(s) but no ice_template to render them")
        if isinstance(self.ice_template, dict):
            return [Segment(t["role"], fill(self._strip_token(t["prompt"]), ex), t["fallback_role"])
                    for ex in examples for t in self.ice_template["round"]]
        if not examples:
            return ""
        items = [fill(self._strip_token(self.ice_template), ex) for ex in examples]
        return self.ice_separator.join(items) + self.ice_eos_token

    def _fill_with_ice(self, text: str, row: Mapping[str, Any], ice: str) -> str:
        if not self.ice_token:
            return fill(text, row)
        return ice.join(fill(part, row) for part in text.split(self.ice_token))

    def render(self, row: Mapping[str, Any], examples: Sequence[Mapping[str, Any]] = ()) -> RenderedPrompt:
        """The prompt for the test ``row`` with ``examples`` (pool rows, in prompt order) in place of the ice_token."""
        examples = list(examples)
        ice = self.render_ice(examples)
        test = dict(row)
        test[self.answer_field] = ""
        prompt = self._prompt()
        if isinstance(prompt, str):
            return RenderedPrompt(dialogue=False, plain=self._fill_with_ice(prompt, test, ice),
                                  n_examples=len(examples))
        segs: list[Segment] = []
        for key in DIALOGUE_KEYS:
            for it in prompt[key]:
                if isinstance(it, str):
                    pieces = it.split(self.ice_token) if self.ice_token else [it]
                    for p_i, piece in enumerate(pieces):
                        if p_i:
                            segs += ice if isinstance(ice, list) else [Segment(None, ice)]
                        segs.append(Segment(None, fill(piece, test)))
                else:
                    text = self._fill_with_ice(it["prompt"], test, ice if isinstance(ice, str) else "")
                    segs.append(Segment(it["role"], text, it["fallback_role"]))
        return RenderedPrompt(dialogue=True, segments=segs, n_examples=len(examples))

    def for_model(self, row: Mapping[str, Any], examples: Sequence[Mapping[str, Any]] = (), tokenizer=None,
                  system_role: Optional[bool] = None) -> ModelPrompt:
        """``render`` then ``RenderedPrompt.for_model``."""
        return self.render(row, examples).for_model(tokenizer, system_role)


def box_template(system_prompt: str = BOX_SYSTEM_PROMPT, prompt_field: str = "prompt",
                 response_field: str = "response") -> ICLTemplate:
    """The sampling stage's default: system prompt, the examples as user/assistant turns (the pool row's
    ``prompt`` / ``response``: reasoning then ``\\box{final sentence}``), then the test row's prompt, answer open."""
    turns = [{"role": HUMAN, "prompt": "{" + prompt_field + "}"}, {"role": BOT, "prompt": "{" + response_field + "}"}]
    return ICLTemplate(
        ice_template={"round": turns},
        prompt_template={"begin": [{"role": SYSTEM, "fallback_role": HUMAN, "prompt": system_prompt}, "</E>"],
                         "round": turns},
        ice_token="</E>", answer_field=response_field)
