"""Rerankers (the ``reranker`` config group): ``cross_encoder`` (any sequence-classification model) and
``query_likelihood`` (the causal LM of the ``model`` group, the offline default). One interface,
``ctxbench.rerankers.base.Reranker``; docs/retrieval.md#rerankers."""

from ctxbench.rerankers.base import Reranker

__all__ = ["Reranker"]
