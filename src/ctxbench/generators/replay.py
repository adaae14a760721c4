"""``generator=replay``: responses made elsewhere (vLLM, an API, a person), read from a JSONL file
(docs/sampling.md#replay).

Each line is an object with ``response`` (the generated text, required) and at least one of ``id`` (the example id),
``prompt`` (the prompt text) or ``messages`` (the chat); other fields are ignored (``finish_reason`` is kept when
given). A request is matched by its key (the example id) against ``id``; failing that, by exact text: ``prompt`` against
the request's rendered ``text`` or its last user message, ``messages`` against its messages. A request with no match
comes back with ``error`` set. Two lines with the same id, or the same prompt with different responses, are an error
naming the file and line. Only parsing, judging and span attachment run on these answers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from ctxbench.core.errors import DataError
from ctxbench.generators.base import Generation, GenerationRequest, Generator
from ctxbench.core.jsonl import iter_jsonl
from ctxbench.core.part import refuse


def _messages_key(messages: Any) -> str:
    return json.dumps([{"role": m.get("role"), "content": m.get("content")} for m in messages], ensure_ascii=False)


@dataclass
class ReplayGenerator(Generator):
    """``path``: the JSONL file of responses (required)."""

    name: ClassVar[str] = "replay"
    path: Optional[str] = None

    def __post_init__(self):
        if not self.path:
            raise refuse("path", self.path, "generator=replay needs the JSONL file of responses (generator.path=...)")
        if not Path(self.path).is_file():
            raise refuse("path", self.path, "no such file")
        self._by_id: dict[str, tuple[str, Optional[str]]] = {}
        self._by_prompt: dict[str, tuple[str, Optional[str]]] = {}
        self._by_messages: dict[str, tuple[str, Optional[str]]] = {}
        self._load()

    def _load(self) -> None:
        path = Path(self.path)

        def fail(problem: str, lineno: int, fld: Optional[str] = None):
            raise DataError(problem, file=path, line=lineno, field=fld)

        for lineno, obj in iter_jsonl(path):
            resp = obj.get("response")
            if not isinstance(resp, str):
                fail("missing or not a string" if "response" in obj else "missing (the generated text)", lineno,
                     "response")
            finish = obj.get("finish_reason")
            entry = (resp, finish if isinstance(finish, str) else None)
            keys = [k for k in ("id", "prompt", "messages") if obj.get(k) is not None]
            if not keys:
                fail("a line needs 'id', 'prompt' or 'messages' to match it to an example", lineno, "id")
            if "id" in keys:
                if not isinstance(obj["id"], (str, int)) or isinstance(obj["id"], bool):
                    fail(f"must be a string or an integer, got {obj['id']!r}", lineno, "id")
                key = str(obj["id"])
                if key in self._by_id:
                    fail(f"id {key!r} appears twice", lineno, "id")
                self._by_id[key] = entry
            if "prompt" in keys:
                if not isinstance(obj["prompt"], str):
                    fail("must be a string", lineno, "prompt")
                self._add_text(self._by_prompt, obj["prompt"], entry, fail, lineno, "prompt")
            if "messages" in keys:
                msgs = obj["messages"]
                if not (isinstance(msgs, list) and all(isinstance(m, dict) for m in msgs)):
                    fail("must be a list of {role, content} objects", lineno, "messages")
                self._add_text(self._by_messages, _messages_key(msgs), entry, fail, lineno, "messages")

    @staticmethod
    def _add_text(table, key, entry, fail, lineno, fld):
        if key in table and table[key][0] != entry[0]:
            fail("the same prompt appears earlier with another response", lineno, fld)
        table[key] = entry

    def _match(self, req: GenerationRequest) -> Optional[tuple[str, Optional[str]]]:
        if str(req.key) in self._by_id:
            return self._by_id[str(req.key)]
        for text in (req.text, req.user_prompt()):
            if text is not None and text in self._by_prompt:
                return self._by_prompt[text]
        if req.messages and _messages_key(req.messages) in self._by_messages:
            return self._by_messages[_messages_key(req.messages)]
        return None

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        out = []
        for req in requests:
            hit = self._match(req)
            if hit is None:
                out.append(Generation(req.key, error=f"replay: no response in {self.path} for id {req.key!r} "
                                                     f"or its prompt"))
            else:
                out.append(Generation(req.key, text=hit[0], finish_reason=hit[1] or "replay"))
        return out
