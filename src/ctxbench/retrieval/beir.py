"""Retrieval folders (docs/retrieval.md#data): the FlagEmbedding layout and the classic BEIR layout, read into
``RetrievalSplit``s with every id a string and every relevance an int.

FlagEmbedding: ``corpus.jsonl`` (``id``, ``text``, optional ``title``), ``<split>_queries.jsonl`` (``id``, ``text``),
``<split>_qrels.jsonl`` (``qid``, ``docid``, ``relevance``). BEIR: ``corpus.jsonl`` (``_id``, ``text``, ``title``),
``queries.jsonl`` (``_id``, ``text``) shared by all splits, ``qrels/<split>.tsv`` (``query-id``, ``corpus-id``,
``score``, after a header line); a split's queries are those its qrels judge, as BEIR's loader does. Either layout may
sit in the folder itself or in sub-folders (``dataset_names`` chooses them; null: every sub-folder holding a
``corpus.jsonl``). Rows may use ``id`` or ``_id`` in both layouts.

Refused with the file and line: a malformed line, a missing or non-string id or text, a duplicate id or qrels pair, a
relevance that is not an integer, qrels naming a query or document that does not exist, an empty corpus.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ctxbench.datasets.base import Paths
from ctxbench.core.errors import DataError
from ctxbench.core.jsonl import iter_jsonl
from ctxbench.core.part import param
from ctxbench.retrieval.data import RetrievalData, RetrievalSplit

log = logging.getLogger(__name__)

CORPUS = "corpus.jsonl"


def _row_id(obj: dict, path: Path, lineno: int) -> str:
    key = "_id" if "_id" in obj and "id" not in obj else "id"
    rid = obj.get(key)
    if isinstance(rid, bool) or not isinstance(rid, (str, int)) or str(rid) == "":
        raise DataError("needs a non-empty string (or integer) id", file=path, line=lineno, field=key)
    return str(rid)


def _text(obj: dict, key: str, path: Path, lineno: int, required: bool = True) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise DataError("must be a string" + ("" if key in obj else " (missing)"), file=path, line=lineno, field=key)
    return value


def read_rows(path: Path, kind: str) -> tuple[list[dict], dict[str, int]]:
    """Corpus (``kind="corpus"``: id, title, text) or query rows (id, text) and the line of each id."""
    if not path.is_file():
        raise DataError(f"no such {kind} file", file=path)
    rows, line_of = [], {}
    for lineno, obj in iter_jsonl(path):
        rid = _row_id(obj, path, lineno)
        if rid in line_of:
            raise DataError(f"duplicate id {rid!r} (first on line {line_of[rid]})", file=path, line=lineno, field="id")
        line_of[rid] = lineno
        row = {"id": rid, "text": _text(obj, "text", path, lineno)}
        if kind == "corpus":
            row["title"] = _text(obj, "title", path, lineno, required=False)
        rows.append(row)
    return rows, line_of


def _relevance(value: Any, path: Path, lineno: int, key: str) -> int:
    if isinstance(value, bool):
        value = None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            value = None
    if not isinstance(value, int):
        raise DataError("relevance must be an integer", file=path, line=lineno, field=key)
    return value


def _add_qrel(qrels: dict, seen: dict, qid: str, docid: str, rel: int, path: Path, lineno: int) -> None:
    if (qid, docid) in seen:
        raise DataError(f"query {qid!r} and document {docid!r} already judged on line {seen[(qid, docid)]}",
                        file=path, line=lineno)
    seen[(qid, docid)] = lineno
    qrels.setdefault(qid, {})[docid] = rel


def read_qrels_jsonl(path: Path) -> tuple[dict[str, dict[str, int]], dict]:
    """FlagEmbedding qrels: ``{qid: {docid: relevance}}`` and the line of each pair."""
    if not path.is_file():
        raise DataError("no such qrels file", file=path)
    qrels: dict[str, dict[str, int]] = {}
    seen: dict = {}
    for lineno, obj in iter_jsonl(path):
        ids = []
        for key in ("qid", "docid"):
            v = obj.get(key)
            if isinstance(v, bool) or not isinstance(v, (str, int)) or str(v) == "":
                raise DataError("needs a non-empty string (or integer) id", file=path, line=lineno, field=key)
            ids.append(str(v))
        _add_qrel(qrels, seen, ids[0], ids[1], _relevance(obj.get("relevance"), path, lineno, "relevance"), path,
                  lineno)
    return qrels, seen


def read_qrels_tsv(path: Path) -> tuple[dict[str, dict[str, int]], dict]:
    """BEIR qrels: a header line, then ``query-id<TAB>corpus-id<TAB>score`` per line."""
    if not path.is_file():
        raise DataError("no such qrels file", file=path)
    qrels: dict[str, dict[str, int]] = {}
    seen: dict = {}
    with open(path, encoding="utf-8", newline="") as fp:
        for lineno, cells in enumerate(csv.reader(fp, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
            if lineno == 1 or not any(c.strip() for c in cells):
                continue  # the header (query-id, corpus-id, score), blank lines
            if len(cells) != 3 or not cells[0].strip() or not cells[1].strip():
                raise DataError(f"expected query-id, corpus-id and score separated by tabs, got {cells!r}",
                                file=path, line=lineno)
            _add_qrel(qrels, seen, cells[0].strip(), cells[1].strip(), _relevance(cells[2], path, lineno, "score"),
                      path, lineno)
    return qrels, seen


def _check_known(qrels: dict, seen: dict, queries: set[str], docs: set[str], path: Path) -> None:
    for (qid, docid), lineno in seen.items():
        if qid not in queries:
            raise DataError(f"query {qid!r} is not in the queries file", file=path, line=lineno)
        if docid not in docs:
            raise DataError(f"document {docid!r} is not in the corpus", file=path, line=lineno)


def read_split(folder: Path, dataset: str, split: str) -> RetrievalSplit:
    """One split of one folder, in whichever layout it has (module doc)."""
    corpus_path = folder / CORPUS
    corpus, _ = read_rows(corpus_path, "corpus")
    if not corpus:
        raise DataError("the corpus is empty", file=corpus_path)
    docs = {r["id"] for r in corpus}
    tsv, fe_qrels = folder / "qrels" / f"{split}.tsv", folder / f"{split}_qrels.jsonl"
    if tsv.is_file():
        qrels, seen = read_qrels_tsv(tsv)
        q_path, qrels_path = folder / "queries.jsonl", tsv
        queries, _ = read_rows(q_path, "queries")
        _check_known(qrels, seen, {q["id"] for q in queries}, docs, qrels_path)
        queries = [q for q in queries if q["id"] in qrels]
    elif fe_qrels.is_file():
        qrels, seen = read_qrels_jsonl(fe_qrels)
        q_path, qrels_path = folder / f"{split}_queries.jsonl", fe_qrels
        queries, _ = read_rows(q_path, "queries")
        _check_known(qrels, seen, {q["id"] for q in queries}, docs, qrels_path)
    else:
        raise DataError(f"split {split!r}: neither {fe_qrels.name} nor qrels/{split}.tsv (splits present: "
                        f"{', '.join(available_splits(folder)) or 'none'})", file=folder)
    if not queries:
        raise DataError(f"split {split!r} has no queries", file=q_path)
    return RetrievalSplit(dataset, split, corpus, queries, qrels, source=str(folder))


def available_splits(folder: Path) -> list[str]:
    found = {p.name[:-len("_qrels.jsonl")] for p in folder.glob("*_qrels.jsonl")}
    found |= {p.stem for p in (folder / "qrels").glob("*.tsv")}
    return sorted(found)


@dataclass(kw_only=True)
class RetrievalFolder(RetrievalData):
    """Retrieval data in a folder (module doc). ``path``: the folder (relative: to ``paths.root``); ``name``: the
    dataset's name when the folder itself holds the files; ``dataset_names``: the sub-folders to read (null: all that
    hold a corpus, or the folder itself); ``splits``: read from each."""

    name: str
    path: Optional[str] = None
    dataset_names: Optional[list[str]] = None
    splits: list[str] = field(default_factory=lambda: ["test"])

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name: must name the dataset")
        self.splits = [self.splits] if isinstance(self.splits, str) else list(self.splits)
        if not self.splits or not all(isinstance(s, str) and s for s in self.splits):
            raise ValueError(f"splits={self.splits!r}: expected a non-empty list of split names")
        if self.dataset_names is not None:
            self.dataset_names = [self.dataset_names] if isinstance(self.dataset_names, str) \
                else list(self.dataset_names)
            if not self.dataset_names or not all(isinstance(s, str) and s for s in self.dataset_names):
                raise ValueError(f"dataset_names={self.dataset_names!r}: expected null or a list of sub-folder names")

    def folder(self, paths: Paths) -> Path:
        if not self.path:
            raise DataError("no folder given (set dataset.path)", field="dataset.path")
        p = Path(self.path).expanduser()
        return p if p.is_absolute() else Path(paths.root) / p

    def datasets(self, folder: Path) -> list[tuple[str, Path]]:
        """``(dataset name, folder)`` for each selected dataset."""
        if not folder.is_dir():
            raise DataError("no such retrieval folder", file=folder)
        if self.dataset_names is not None:
            out = [(n, folder / n) for n in self.dataset_names]
            for n, f in out:
                if not (f / CORPUS).is_file():
                    raise DataError(f"dataset {n!r}: no {CORPUS} in its sub-folder", file=f)
            return out
        if (folder / CORPUS).is_file():
            return [(self.name, folder)]
        subs = sorted((p.name, p) for p in folder.iterdir() if (p / CORPUS).is_file())
        if not subs:
            raise DataError(f"no {CORPUS} in the folder or its sub-folders", file=folder)
        return subs

    def load_splits(self, paths: Paths) -> list[RetrievalSplit]:
        out = [read_split(f, name, split) for name, f in self.datasets(self.folder(paths)) for split in self.splits]
        for s in out:
            log.info("retrieval data %s: %d documents, %d queries, %d judged", s.column, len(s.corpus),
                     len(s.queries), len(s.qrels))
        return out


@dataclass(kw_only=True)
class WikiDemo(RetrievalFolder):
    """The Wikipedia demo set (``ctxbench.datasets.wiki_demo``): written once with ``n_docs``, ``n_queries`` and
    ``seed`` into ``path`` (null: ``<paths.data_dir>/wiki_demo/<n_docs>_<n_queries>_<seed>``) when missing."""

    name: str = "wiki_demo"
    n_docs: int = param(10033, ge=1)
    n_queries: int = param(500, ge=1)
    seed: int = 0

    def folder(self, paths: Paths) -> Path:
        folder = super().folder(paths) if self.path else \
            Path(paths.data_dir) / "wiki_demo" / f"{self.n_docs}_{self.n_queries}_{self.seed}"
        if not (folder / CORPUS).is_file():
            from ctxbench.datasets.wiki_demo import write_wiki_demo

            log.info("writing the Wikipedia demo set into %s", folder)
            write_wiki_demo(folder, n_docs=self.n_docs, n_queries=self.n_queries, seed=self.seed)
        return folder
