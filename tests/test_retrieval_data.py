"""Retrieval data: the folder reader on hand-made FlagEmbedding and BEIR folders (and every bad-input error), and the
context-retrieval split of RULER examples against their evidence spans."""

import pytest

from ctxbench.datasets.base import Paths
from ctxbench.retrieval.beir import RetrievalFolder
from ctxbench.datasets.ruler import ruler_example
from ctxbench.core.errors import DataError, ExampleRefused
from ctxbench.retrieval.context import context_split

from helpers.records import write_jsonl


CORPUS = [{"id": "d1", "title": "Paris", "text": "Capital of France."}, {"id": 2, "text": "No title here."},
          {"id": "d3", "title": None, "text": "Third."}]


def flag_folder(root, qrels=None, queries=None, corpus=None):
    write_jsonl(root / "corpus.jsonl", CORPUS if corpus is None else corpus)
    write_jsonl(root / "test_queries.jsonl", queries or [{"id": "q1", "text": "capital?"}, {"id": 7, "text": "x"}])
    write_jsonl(root / "test_qrels.jsonl", qrels or [{"qid": "q1", "docid": "d1", "relevance": 1},
                                                     {"qid": 7, "docid": 2, "relevance": "2"},
                                                     {"qid": "7", "docid": "d3", "relevance": 0}])
    return root


def beir_folder(root, tsv=None):
    write_jsonl(root / "corpus.jsonl", [{"_id": "d1", "title": "T", "text": "one"}, {"_id": "d2", "text": "two"}])
    write_jsonl(root / "queries.jsonl", [{"_id": "q1", "text": "first"}, {"_id": "q2", "text": "second"},
                                         {"_id": "q9", "text": "judged in no split"}])
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    (root / "qrels" / "test.tsv").write_text(tsv or "query-id\tcorpus-id\tscore\nq1\td2\t1\nq2\td1\t2\n")
    (root / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td2\t1\n")
    return root


def load(path, **kw):
    return RetrievalFolder(name="demo", path=str(path), **kw).load_splits(Paths(root="/"))


def test_flagembedding_layout(tmp_path):
    (s,) = load(flag_folder(tmp_path / "fe"))
    assert (s.dataset, s.split, s.column) == ("demo", "test", "demo-test")
    assert [r["id"] for r in s.corpus] == ["d1", "2", "d3"]  # ids are strings
    assert [r["title"] for r in s.corpus] == ["Paris", "", ""]
    assert [q["id"] for q in s.queries] == ["q1", "7"]
    assert s.qrels == {"q1": {"d1": 1}, "7": {"2": 2, "d3": 0}}  # relevance is an int
    assert all(type(r) is int for d in s.qrels.values() for r in d.values())


def test_beir_layout_and_splits(tmp_path):
    test, dev = load(beir_folder(tmp_path / "scifact"), splits=["test", "dev"])
    assert [r["id"] for r in test.corpus] == ["d1", "d2"]
    assert [q["id"] for q in test.queries] == ["q1", "q2"]  # the split's judged queries only, as BEIR
    assert test.qrels == {"q1": {"d2": 1}, "q2": {"d1": 2}}
    assert [q["id"] for q in dev.queries] == ["q2"] and dev.column == "demo-dev"


def test_sub_folders_by_name_or_all(tmp_path):
    flag_folder(tmp_path / "many" / "b")
    beir_folder(tmp_path / "many" / "a")
    (tmp_path / "many" / "notes").mkdir()
    assert [s.column for s in load(tmp_path / "many")] == ["a-test", "b-test"]
    assert [s.column for s in load(tmp_path / "many", dataset_names=["b"])] == ["b-test"]
    with pytest.raises(DataError, match="dataset 'c': no corpus.jsonl"):
        load(tmp_path / "many", dataset_names=["c"])


def test_fingerprint_follows_the_content(tmp_path):
    a = load(flag_folder(tmp_path / "a"))[0].fingerprint()
    assert a == load(flag_folder(tmp_path / "b"))[0].fingerprint()
    changed = [dict(CORPUS[0], text="Capital of France!"), *CORPUS[1:]]
    assert a != load(flag_folder(tmp_path / "c", corpus=changed))[0].fingerprint()


@pytest.mark.parametrize("case, where, message", [
    ("unknown doc", "test_qrels.jsonl:1", "document 'zz' is not in the corpus"),
    ("unknown query", "test_qrels.jsonl:1", "query 'qq' is not in the queries file"),
    ("duplicate doc", "corpus.jsonl:2", "duplicate id 'd1' (first on line 1)"),
    ("duplicate query", "test_queries.jsonl:2", "duplicate id 'q1'"),
    ("duplicate pair", "test_qrels.jsonl:2", "already judged on line 1"),
    ("empty corpus", "corpus.jsonl", "the corpus is empty"),
    ("bad json", "corpus.jsonl:2", "not a JSON object"),
    ("no id", "corpus.jsonl:1", "field 'id': needs a non-empty string"),
    ("text not a string", "test_queries.jsonl:1", "field 'text': must be a string"),
    ("bad relevance", "test_qrels.jsonl:1", "field 'relevance': relevance must be an integer"),
    ("missing split", "fe", "split 'test': neither test_qrels.jsonl nor qrels/test.tsv"),
])
def test_bad_input_names_file_and_line(tmp_path, case, where, message):
    root = tmp_path / "fe"
    q1 = {"id": "q1", "text": "capital?"}
    kw = {"unknown doc": dict(qrels=[{"qid": "q1", "docid": "zz", "relevance": 1}]),
          "unknown query": dict(qrels=[{"qid": "qq", "docid": "d1", "relevance": 1}]),
          "duplicate doc": dict(corpus=[CORPUS[0], CORPUS[0]]),
          "duplicate query": dict(queries=[q1, q1]),
          "duplicate pair": dict(qrels=[{"qid": "q1", "docid": "d1", "relevance": 1}] * 2),
          "empty corpus": dict(corpus=[]),
          "bad json": dict(corpus=[CORPUS[0], "{oops"]),
          "no id": dict(corpus=[{"text": "no id"}]),
          "text not a string": dict(queries=[{"id": "q1", "text": 3}]),
          "bad relevance": dict(qrels=[{"qid": "q1", "docid": "d1", "relevance": "high"}]),
          "missing split": {}}[case]
    flag_folder(root, **kw)
    if case == "missing split":
        (root / "test_qrels.jsonl").unlink()
    with pytest.raises(DataError) as err:
        load(root)
    text = str(err.value)
    assert str(root / where) in text or text.startswith(str(root)), text
    assert message in text


def test_bad_beir_tsv_line(tmp_path):
    root = beir_folder(tmp_path / "b", tsv="query-id\tcorpus-id\tscore\nq1\td2\n")
    with pytest.raises(DataError, match=r"qrels/test.tsv:2: expected query-id, corpus-id and score"):
        load(root)


def test_missing_folder_and_path(tmp_path):
    with pytest.raises(DataError, match="no such retrieval folder"):
        load(tmp_path / "nowhere")
    with pytest.raises(DataError, match="set dataset.path"):
        RetrievalFolder(name="x").load_splits(Paths(root="/"))
    with pytest.raises(ValueError, match="splits"):
        RetrievalFolder(name="x", splits=[])


# --- context retrieval on RULER examples ----------------------------------------------------------------------------

HEAD = "Some special magic numbers are hidden within the following text. Remember them.\n"
CONTEXT = ("The grass is green. The sky is blue.\nOne of the special magic numbers for red-cat is: 123.\n"
           "Here we go. There and back again.\nOne of the special magic numbers for red-cat is: 456. And more hay.\n")
QUESTION = "What are all the special magic numbers for red-cat mentioned in the provided text?"
NEEDLES = ["One of the special magic numbers for red-cat is: 123.",
           "One of the special magic numbers for red-cat is: 456."]


def ruler_line(index=0, needles=True):
    text = HEAD + CONTEXT + QUESTION
    spans = []
    for n in NEEDLES:
        s = text.index(n)
        spans.append({"span": [s, s + len(n)], "context_span": [s - len(HEAD), s - len(HEAD) + len(n)],
                      "sentence": n})
    return {"index": index, "input": text, "outputs": ["123", "456"],
            "answer_prefix": " The special magic numbers for red-cat mentioned in the provided text are",
            "needle_spans": spans if needles else None}


def test_context_split_against_the_evidence_spans():
    examples = [ruler_example(ruler_line(i), task="niah_x") for i in range(2)]
    split = context_split(examples, "niah_x")
    assert split.column == "niah_x-context" and len(split.groups) == 2
    docs, qs = split.groups[0]
    texts = [split.corpus[d]["text"] for d in docs]
    # the context's sentences only: not the instruction, not the question
    assert texts == ["The grass is green.", "The sky is blue.", NEEDLES[0], "Here we go.", "There and back again.",
                     NEEDLES[1], "And more hay."]
    assert [split.queries[q]["text"] for q in qs] == [QUESTION]
    qid = examples[0].example_id
    relevant = {d for d, r in split.qrels[qid].items() if r >= 1}
    assert {split.corpus[d]["text"] for d in docs if split.corpus[d]["id"] in relevant} == set(NEEDLES)
    # the sentence index in the ids is the prompt's, as in attr_mask_indices
    assert sorted(int(d.rsplit("#", 1)[1]) for d in relevant) == examples[0].attr_mask_indices
    # the second example's documents are its own
    docs2, _ = split.groups[1]
    assert all(split.corpus[d]["id"].startswith(examples[1].example_id + "#") for d in docs2)


def test_context_split_needs_evidence():
    with pytest.raises(ExampleRefused, match="no example carries evidence spans"):
        context_split([ruler_example(ruler_line(needles=False), task="t")], "t")
    # examples without spans are left out when others have them
    mixed = [ruler_example(ruler_line(0), task="t"), ruler_example(ruler_line(1, needles=False), task="t")]
    assert len(context_split(mixed, "t").queries) == 1
