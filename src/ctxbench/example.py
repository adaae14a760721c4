"""CachedExample: one prompt, the generation to explain and its token spans; JSONL store with strict validation.

Token spans belong to the tokenizer that made them. ``CachedExample.spans_for`` gives them in another tokenizer's
coordinates, redone from the answer's characters when needed (docs/data.md, "Spans and tokenizers").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from ctxbench.core.errors import DataError
from ctxbench.core.jsonl import AppendOnlyJsonl, iter_jsonl
from ctxbench.utils.spans import answer_token_spans, tokenizer_name

Span = list  # [start, end], closed interval of target-token indices

_SPAN_FIELDS = ("indices_to_explain", "sink_span", "thinking_span")
_ID_KEYS = ("id", "example_id", "index")


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
        for key in _ID_KEYS:
            if self.metadata.get(key) is not None:
                return str(self.metadata[key])
        raise DataError("example has no metadata.id / example_id / index to identify it", field="metadata.id")

    @property
    def has_id(self) -> bool:
        return any(self.metadata.get(key) is not None for key in _ID_KEYS)

    def _keeps_cached_spans(self, tokenizer) -> bool:
        """Whether the cached spans are in ``tokenizer``'s coordinates: it made them (``metadata.span_tokenizer``).
        A row that records no tokenizer counts as this one's only when it has no answer characters to redo them from
        (a hand-made row): a cache made elsewhere, like FlashTrace's code's (spans in its Qwen3 tokenizer),
        records none but has ``boxed_answer``."""
        made_by = self.metadata.get("span_tokenizer")
        if made_by is not None:
            return made_by == tokenizer_name(tokenizer)
        return self.metadata.get("sink_char_span") is None and not self.metadata.get("boxed_answer")

    def _answer_chars(self) -> Optional[tuple[int, int, str]]:
        """``(start, end, field)``: the answer's characters ``[start, end)`` in the target, from
        ``metadata.sink_char_span``, else the last occurrence of ``metadata.boxed_answer``, and the field they came
        from; None when neither is recorded. A recorded answer that is not inside the target is a DataError."""
        md = self.metadata
        if md.get("sink_char_span") is not None:
            span = md["sink_char_span"]
            if not (isinstance(span, list) and len(span) == 2 and all(_is_int(v) for v in span)
                    and 0 <= span[0] < span[1] <= len(self.target)):
                raise DataError(f"{span!r} is not a [start, end) character span inside the target's "
                                f"{len(self.target)} characters", field="metadata.sink_char_span")
            return span[0], span[1], "metadata.sink_char_span"
        answer = md.get("boxed_answer")
        if not answer:
            return None
        if not isinstance(answer, str):
            raise DataError(f"must be a string, got {type(answer).__name__}", field="metadata.boxed_answer")
        start = self.target.rfind(answer)
        if start < 0:
            raise DataError(f"{answer!r} does not occur in the target", field="metadata.boxed_answer")
        return start, start + len(answer), "metadata.boxed_answer"

    def spans_for(self, tokenizer) -> tuple[Optional[Span], Optional[Span], str]:
        """Sink and thinking spans in ``tokenizer``'s target-token coordinates (the target must be set), and where they
        came from: ``cached``, ``recomputed`` (sink = the tokens overlapping the answer's characters, thinking =
        ``[0, sink_start - 1]``) or ``whole generation`` (nothing to locate the answer with). A DataError, naming the
        field, when the spans can be neither kept nor redone."""
        sink = self.sink_span if self.sink_span is not None else self.indices_to_explain
        if sink is not None and self._keeps_cached_spans(tokenizer):
            return sink, self.thinking_span, "cached"
        chars = self._answer_chars()
        if chars is None:
            if sink is not None:
                raise DataError(f"spans were made by {self.metadata.get('span_tokenizer')!r}, not "
                                f"{tokenizer_name(tokenizer)!r}, and no character span is recorded to redo them",
                                field="metadata.sink_char_span")
            return None, None, "whole generation"
        start, end, where = chars
        new_sink, new_think, _ = answer_token_spans(tokenizer, self.target, start, end)
        if new_sink is None:
            raise DataError("no token of the target overlaps the answer", field=where)
        # A gold RULER target has no chain of thought: keep its thinking span null.
        think = new_think if self.thinking_span is not None else None
        return new_sink, think, "recomputed"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, obj: dict[str, Any], *, file=None, line=None) -> "CachedExample":
        validate_example(obj, file=file, line=line)
        return cls(**{f.name: obj[f.name] for f in fields(cls)})


FIELD_NAMES = tuple(f.name for f in fields(CachedExample))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def validate_example(obj: Any, *, file=None, line=None, n_target_tokens: Optional[int] = None) -> None:
    """Check fields and types exactly (docs/data.md, "CachedExample JSONL"). Spans must be ``[start, end]`` with ``0 <=
    start <= end`` and, when the target's token count is known, ``end < n_target_tokens``. Errors name file, line and
    field."""

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
        if obj[name] is not None:
            _check_span(obj, name, fail)
    if n_target_tokens is not None:
        _check_token_bounds(obj, n_target_tokens, fail)


def _check_span(obj: dict, name: str, fail: Callable[[str, str], None]) -> None:
    """A span field: ``[start, end]`` integers with ``0 <= start <= end``, on a target that is there."""
    span = obj[name]
    if not (isinstance(span, list) and len(span) == 2 and all(_is_int(v) for v in span)):
        fail(f"must be null or a 2-element list of integers [start, end], got {span!r}", name)
    s, e = span
    if s < 0 or e < s:
        fail(f"span {span} is not a closed interval with 0 <= start <= end", name)
    if obj["target"] is None:
        fail(f"span {span} given but target is null", name)


def _check_token_bounds(obj: dict, n_target_tokens: int, fail: Callable[[str, str], None]) -> None:
    for name in _SPAN_FIELDS:
        span = obj[name]
        if span is not None and span[1] >= n_target_tokens:
            fail(f"span {span} lies outside the target's {n_target_tokens} tokens", name)


def _check_spans_for(example: CachedExample, tokenizer, file, line) -> None:
    """Spans kept as they are must fit the target's tokens in ``tokenizer``; spans to be redone need an answer that
    this tokenizer's tokens overlap. Checked on reading, so a bad row stops the stage before any model loads."""
    if example.target is None:
        return

    def fail(problem: str, fld: Optional[str] = None):
        raise DataError(problem, file=file, line=line, field=fld)

    try:
        _, _, origin = example.spans_for(tokenizer)
    except DataError as exc:
        fail(exc.problem, exc.field)
    if origin == "cached":
        n = len(tokenizer(example.target, add_special_tokens=False)["input_ids"])
        _check_token_bounds(vars(example), n, fail)


def _number_unidentified(rows: list[tuple[int, CachedExample]], file) -> None:
    """Give each row of a file without ids (a cache made elsewhere, e.g. FlashTrace's code's) its position as
    ``metadata.index``: stable for the same file, which resuming by example id needs. A file where only some rows have
    an id is refused, since positions could collide with the ids that are there."""
    without = [(lineno, ex) for lineno, ex in rows if not ex.has_id]
    if not without:
        return
    if len(without) < len(rows):
        raise DataError("no metadata.id / example_id / index, while other rows of the file have one",
                        file=file, line=without[0][0], field="metadata.id")
    for position, (_, ex) in enumerate(rows):
        ex.metadata["index"] = position


def read_examples(path: str | Path, tokenizer=None) -> Iterator[CachedExample]:
    """Read and validate a CachedExample JSONL file; rows of a file without ids are numbered 0..n-1
    (``metadata.index``). With a tokenizer, spans that will be used as they are must fit the target's token count,
    and rows whose spans will be redone for it (made by another or an unrecorded tokenizer) must have an answer that
    this tokenizer's tokens overlap."""
    rows = [(lineno, CachedExample.from_dict(obj, file=path, line=lineno)) for lineno, obj in iter_jsonl(path)]
    _number_unidentified(rows, path)
    first: dict[str, int] = {}
    for lineno, example in rows:  # a repeated id would be worked twice and its results mixed up
        seen = first.setdefault(example.example_id, lineno)
        if seen != lineno:
            raise DataError(f"example id {example.example_id!r} again (first at line {seen}); ids must be unique",
                            file=path, line=lineno, field="metadata.id")
    for lineno, example in rows:
        if tokenizer is not None:
            _check_spans_for(example, tokenizer, path, lineno)
        yield example


class ExampleStore(AppendOnlyJsonl):
    """Append-only CachedExample cache: validates what is already there, resumes by example id, writes whole lines."""

    def __init__(self, path: str | Path):
        def check(obj: dict, lineno: int) -> None:
            validate_example(obj, file=path, line=lineno)

        super().__init__(path, key=lambda obj: CachedExample(**obj).example_id, validate=check)

    def add(self, example: CachedExample) -> bool:
        validate_example(example.to_dict(), file=self.path)
        return self.append(example.to_dict())
