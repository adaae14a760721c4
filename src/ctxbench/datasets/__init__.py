"""Dataset loaders: MoreHopQA, RULER JSONL, sampled CachedExample caches, and name resolution."""

from __future__ import annotations

from ctxbench.datasets.morehopqa import load_morehopqa
from ctxbench.datasets.resolve import DatasetSource, resolve_dataset
from ctxbench.datasets.ruler import load_ruler_jsonl
from ctxbench.example import CachedExample, read_examples


def load_source(source: DatasetSource, tokenizer=None) -> list[CachedExample]:
    """Load every example of a resolved source (spans validated against ``tokenizer`` when given)."""
    if source.kind == "cache":
        return list(read_examples(source.path, tokenizer=tokenizer))
    if source.kind == "ruler":
        return load_ruler_jsonl(source.path, tokenizer=tokenizer)
    if source.kind == "morehopqa":
        return load_morehopqa(source.path)
    raise ValueError(f"unknown source kind {source.kind!r}")


__all__ = ["CachedExample", "DatasetSource", "load_morehopqa", "load_ruler_jsonl", "load_source", "read_examples",
           "resolve_dataset"]
