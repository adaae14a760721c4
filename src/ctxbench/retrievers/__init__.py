"""In-context example retrievers and corpus rankers behind one interface (``Retriever``: fit a pool, retrieve k per
query); one module per retriever, each reached by ``_target_`` from ``conf/retriever/<name>.yaml``.
docs/retrievers.md."""

from ctxbench.retrievers.base import Retrieved, Retriever, Row, TextRetriever, row_id, row_text, top_k
from ctxbench.retrievers.pool import default_pool_path, example_rows, load_pool

__all__ = ["Retrieved", "Retriever", "Row", "TextRetriever", "row_id", "row_text", "top_k", "default_pool_path",
           "example_rows", "load_pool"]
