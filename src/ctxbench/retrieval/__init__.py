"""Retrieval evaluation (``mode=retrieval``, docs/retrieval.md): retrieval data, search with any retriever, reranking,
IR metrics and their reports."""
