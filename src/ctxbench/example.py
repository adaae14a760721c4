"""CachedExample: one prompt, the generation to explain and its token spans; JSONL store with strict validation."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from ctxbench.errors import DataError
from ctxbench.jsonl import AppendOnlyJsonl, iter_jsonl

Span = list  # [start, end], closed interval of target-token indices

_SPAN_FIELDS = ("indices_to_explain", "sink_span", "thinking_span")


@dataclass
class CachedExample:
    prompt: str
    target: Optional[str] = None
    indices_to_explain: Optional[Span] = None
    attr_mask_indices: Optional[list] = None
    sink_span: Optional[Span] = None
    thinking_span: Optional[Span] = None
    metadata: dict = field(default_factory=dict)

    @property
    def example_id(self) -> str:
        """Stable identity for resuming: metadata ``id`` (or ``example_id``), else the dataset ``index``."""
        for key in ("id", "example_id", "index"):
            if self.metadata.get(key) is not None:
                return str(self.metadata[key])
        raise DataError("example has no metadata.id / example_id / index to identify it", field="metadata.id")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, obj: dict[str, Any], *, file=None, line=None,
                  n_target_tokens: Optional[int] = None) -> "CachedExample":
        validate_example(obj, file=file, line=line, n_target_tokens=n_target_tokens)
        return cls(**{f.name: obj[f.name] for f in fields(cls)})


FIELD_NAMES = tuple(f.name for f in fields(CachedExample))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def validate_example(obj: Any, *, file=None, line=None, n_target_tokens: Optional[int] = None) -> None:
    """Check fields and types exactly (docs/data.md, "CachedExample JSONL"). Spans must be ``[start, end]`` with ``0 <= start <= end`` and, when the
    target's token count is known, ``end < n_target_tokens``. Errors name file, line and field."""

    def fail(problem: str, fld: Optional[str] = None):
        raise DataError(problem, file=file, line=line, field=fld)

    if not isinstance(obj, dict):
        fail(f"expected a JSON object, got {type(obj).__name__}")
    missing = [n for n in FIELD_NAMES if n not in obj]
    if missing:
        fail(f"missing field(s) {missing}", missing[0])
    extra = sorted(set(obj) - set(FIELD_NAMES))
    if extra:
        fail(f"unknown field(s) {extra}; a CachedExample has exactly {list(FIELD_NAMES)}", extra[0])
    if not isinstance(obj["prompt"], str):
        fail(f"must be a string, got {type(obj['prompt']).__name__}", "prompt")
    if obj["target"] is not None and not isinstance(obj["target"], str):
        fail(f"must be a string or null, got {type(obj['target']).__name__}", "target")
    if not isinstance(obj["metadata"], dict):
        fail(f"must be an object, got {type(obj['metadata']).__name__}", "metadata")
    ami = obj["attr_mask_indices"]
    if ami is not None and not (isinstance(ami, list) and all(_is_int(i) and i >= 0 for i in ami)):
        fail("must be null or a list of non-negative integers", "attr_mask_indices")
    for name in _SPAN_FIELDS:
        span = obj[name]
        if span is None:
            continue
        if not (isinstance(span, list) and len(span) == 2 and all(_is_int(v) for v in span)):
            fail(f"must be null or a 2-element list of integers [start, end], got {span!r}", name)
        s, e = span
        if s < 0 or e < s:
            fail(f"span {span} is not a closed interval with 0 <= start <= end", name)
        if obj["target"] is None:
            fail(f"span {span} given but target is null", name)
        if n_target_tokens is not None and e >= n_target_tokens:
            fail(f"span {span} lies outside the target's {n_target_tokens} tokens", name)


def count_target_tokens(tokenizer) -> Callable[[dict], Optional[int]]:
    def count(obj: dict) -> Optional[int]:
        target = obj.get("target")
        if not isinstance(target, str):
            return None
        return len(tokenizer(target, add_special_tokens=False)["input_ids"])

    return count


def read_examples(path: str | Path, tokenizer=None) -> Iterator[CachedExample]:
    """Read and validate a CachedExample JSONL file. With a tokenizer, spans are also checked against the target's
    token count (they must be in that tokenizer's coordinates)."""
    counter = count_target_tokens(tokenizer) if tokenizer is not None else None
    for lineno, obj in iter_jsonl(path):
        n = counter(obj) if counter else None
        yield CachedExample.from_dict(obj, file=path, line=lineno, n_target_tokens=n)


class ExampleStore(AppendOnlyJsonl):
    """Append-only CachedExample cache: validates what is already there, resumes by example id, writes whole lines."""

    def __init__(self, path: str | Path):
        def check(obj: dict, lineno: int) -> None:
            validate_example(obj, file=path, line=lineno)

        super().__init__(path, key=lambda obj: CachedExample(**obj).example_id, validate=check)

    def add(self, example: CachedExample) -> bool:
        validate_example(example.to_dict(), file=self.path)
        return self.append(example.to_dict())
