"""Datasets: one class per kind (``MoreHopQA``, ``RulerTask``, ``RulerJsonl``, ``CachedJsonl``) with the sampled-cache
priority of ``Dataset.load``; the raw loaders underneath."""

from __future__ import annotations

from ctxbench.datasets.base import Dataset, LoadedSource, Paths, file_fingerprint
from ctxbench.datasets.cached import CachedJsonl
from ctxbench.datasets.morehopqa import MoreHopQA, load_morehopqa, morehopqa_sample
from ctxbench.datasets.ruler import load_ruler_jsonl
from ctxbench.datasets.ruler_task import RulerJsonl, RulerTask
from ctxbench.example import CachedExample, read_examples

__all__ = ["CachedExample", "CachedJsonl", "Dataset", "LoadedSource", "MoreHopQA", "Paths", "RulerJsonl", "RulerTask",
           "file_fingerprint", "load_morehopqa", "load_ruler_jsonl", "morehopqa_sample", "read_examples"]
