"""CachedExample validation, JSONL reading errors and the resumable append-only store."""

import json

import pytest

from ctxbench.core.errors import DataError
from ctxbench.example import CachedExample, ExampleStore, read_examples, validate_example

from helpers.records import write_jsonl


def row(i=0, **over):
    d = dict(prompt=f"p{i}", target="think\nans", indices_to_explain=[2, 3], attr_mask_indices=[0],
             sink_span=[2, 3], thinking_span=[0, 1], metadata={"id": f"ex{i}"})
    d.update(over)
    return d


def test_roundtrip(tmp_path):
    p = tmp_path / "c.jsonl"
    write_jsonl(p, [json.dumps(row(0)), "", json.dumps(row(1))])
    got = list(read_examples(p))
    assert [e.example_id for e in got] == ["ex0", "ex1"]
    assert got[0] == CachedExample(**row(0))


@pytest.mark.parametrize("bad_line, field, text", [
    ("{not json", None, "not a JSON object"),
    ("[1, 2]", None, "not a JSON object"),
    (json.dumps({k: v for k, v in row().items() if k != "sink_span"}), "sink_span", "missing field"),
    (json.dumps(row(prompt=3)), "prompt", "must be a string"),
    (json.dumps(row(target=["x"])), "target", "string or null"),
    (json.dumps(row(metadata=[])), "metadata", "must be an object"),
    (json.dumps(row(sink_span=[1])), "sink_span", "2-element"),
    (json.dumps(row(sink_span=[1, "2"])), "sink_span", "2-element"),
    (json.dumps(row(sink_span=[True, 2])), "sink_span", "2-element"),
    (json.dumps(row(thinking_span=[3, 1])), "thinking_span", "closed interval"),
    (json.dumps(row(attr_mask_indices=[-1])), "attr_mask_indices", "non-negative"),
    (json.dumps(row(extra=1)), "extra", "unknown field"),
    (json.dumps(row(target=None)), "indices_to_explain", "target is null"),
])
def test_bad_lines_name_file_line_field(tmp_path, bad_line, field, text):
    p = tmp_path / "bad.jsonl"
    write_jsonl(p, [json.dumps(row(0)), bad_line])
    with pytest.raises(DataError) as err:
        list(read_examples(p))
    msg = str(err.value)
    assert f"{p}:2" in msg and text in msg
    assert err.value.line == 2
    if field:
        assert f"field '{field}'" in msg


def test_a_broken_line_is_named_once(tmp_path):
    p = tmp_path / "bad.jsonl"
    write_jsonl(p, [json.dumps(row(0)), "{not json"])
    with pytest.raises(DataError) as err:
        list(read_examples(p))
    assert str(err.value) == f"{p}:2: not a JSON object (Expecting property name enclosed in double quotes at column 2)"


def test_a_repeated_example_id_is_refused_naming_both_lines(tmp_path):
    p = tmp_path / "c.jsonl"
    write_jsonl(p, [json.dumps(row(0)), json.dumps(row(1)), json.dumps(row(0, prompt="other"))])
    with pytest.raises(DataError) as err:
        list(read_examples(p))
    assert str(err.value) == (f"{p}:3: field 'metadata.id': example id 'ex0' again (first at line 1); ids must be "
                              f"unique")


def test_span_out_of_range_with_tokenizer(tmp_path):
    class WordTok:  # one token per whitespace-separated word: counts are obvious
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": list(range(len(text.split())))}

    p = tmp_path / "c.jsonl"
    write_jsonl(p, [json.dumps(row(0, target="a b c", sink_span=[1, 2], indices_to_explain=[1, 2])),
                    json.dumps(row(1, target="a b c", sink_span=[2, 3], indices_to_explain=[1, 2]))])
    with pytest.raises(DataError,
                       match=r"c.jsonl:2: field 'sink_span': span \[2, 3\] lies outside the target's 3 tokens"):
        list(read_examples(p, tokenizer=WordTok()))
    assert len(list(read_examples(p))) == 2  # without a tokenizer the count is unknown: not checked


def test_store_resumes_without_duplicates(tmp_path):
    p = tmp_path / "cache.jsonl"
    with ExampleStore(p) as store:
        assert store.add(CachedExample(**row(0)))
        assert store.add(CachedExample(**row(1)))
    # Simulate a crash in the middle of writing the third line.
    with open(p, "a", encoding="utf-8") as fp:
        fp.write(json.dumps(row(2))[:25])
    with ExampleStore(p) as store:
        assert store.done == {"ex0", "ex1"}
        assert "ex1" in store
        assert not store.add(CachedExample(**row(1)))  # already there: skipped
        assert store.add(CachedExample(**row(2)))
    ids = [e.example_id for e in read_examples(p)]
    assert ids == ["ex0", "ex1", "ex2"]
    assert p.read_text().endswith("\n")


def test_store_cuts_invalid_last_line_but_keeps_complete_ones(tmp_path):
    p = tmp_path / "cache.jsonl"
    write_jsonl(p, [json.dumps(row(0)), '{"prompt": "tor'])
    with ExampleStore(p) as store:
        assert store.done == {"ex0"}
    assert len(p.read_text().splitlines()) == 1


def test_store_refuses_invalid_existing_content(tmp_path):
    p = tmp_path / "cache.jsonl"
    write_jsonl(p, [json.dumps(row(0)), json.dumps(row(1, prompt=None)), json.dumps(row(2))])
    with pytest.raises(DataError, match="cache.jsonl:2: field 'prompt'"):
        ExampleStore(p)
    assert len(p.read_text().splitlines()) == 3  # nothing lost


def test_store_rejects_duplicate_ids_on_disk(tmp_path):
    p = tmp_path / "cache.jsonl"
    write_jsonl(p, [json.dumps(row(0)), json.dumps(row(0))])
    with pytest.raises(DataError, match="duplicate key 'ex0'"):
        ExampleStore(p)


def test_store_validates_before_writing(tmp_path):
    p = tmp_path / "cache.jsonl"
    with ExampleStore(p) as store:
        with pytest.raises(DataError, match="sink_span"):
            store.add(CachedExample(**row(0, sink_span=[5, 1])))
    assert p.read_text() == ""


def test_validate_accepts_all_null_optionals():
    validate_example(dict(prompt="p", target=None, indices_to_explain=None, attr_mask_indices=None,
                          sink_span=None, thinking_span=None, metadata={}))


def test_store_refuses_a_second_writer_and_loses_nothing(tmp_path):
    """The same job started twice: the second writer (here another process, holding a line half-written) is refused
    with one line naming the file, before it could cut that line as torn or write the same keys."""
    import subprocess
    import sys

    p = tmp_path / "cache.jsonl"
    with ExampleStore(p) as store:
        store.add(CachedExample(**row(0)))
        with pytest.raises(DataError, match=r"cache.jsonl: another process is writing this file"):
            ExampleStore(p)
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys\n"
            "from ctxbench.example import ExampleStore\n"
            f"store = ExampleStore({str(p)!r})\n"
            "store._fp.write('{\"prompt\": \"half'); store._fp.flush()\n"  # a line in progress
            "print('ready', flush=True)\n"
            "sys.stdin.readline()\n"
            "store._fp.write('\"}\\n'); store.close()\n")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(DataError, match="another process is writing"):
            ExampleStore(p)
        assert p.read_text().endswith('{"prompt": "half')  # not cut as a torn line
    finally:
        holder.communicate("\n", timeout=60)
    assert holder.returncode == 0
    assert p.read_text().splitlines()[-1] == '{"prompt": "half"}'  # the other writer finished its line


def test_store_lock_file_lives_as_long_as_the_writer(tmp_path):
    """The writer's lock is ``<file>.lock`` (ctxbench.utils.locks, the project's one lock scheme): it goes when the
    writer closes, so the folder keeps no trace of it; a refused writer leaves the holder's lock alone; one left behind
    by a killed writer is held by nobody and does not block the rerun; a file refused for its content leaves the folder
    as it was."""
    from ctxbench.utils.locks import lock_path

    p, lock = tmp_path / "cache.jsonl", lock_path(tmp_path / "cache.jsonl")
    with ExampleStore(p) as store:
        assert lock.exists()
        with pytest.raises(DataError, match="another process is writing"):
            ExampleStore(p)
        assert lock.exists()
        store.add(CachedExample(**row(0)))
    assert [x.name for x in tmp_path.iterdir()] == ["cache.jsonl"]
    lock.write_text("")  # a killed writer's
    with ExampleStore(p) as store:
        assert len(store) == 1
    assert [x.name for x in tmp_path.iterdir()] == ["cache.jsonl"]
    p.write_text(p.read_text() * 2)  # the same example twice
    with pytest.raises(DataError, match="duplicate key"):
        ExampleStore(p)
    assert [x.name for x in tmp_path.iterdir()] == ["cache.jsonl"]


def test_a_decoder_message_ending_on_at_says_at_once(tmp_path):
    """An unterminated string (its line's newline is then a control character): the decoder's message ends on "at",
    which the column follows without a second "at"."""
    p = tmp_path / "bad.jsonl"
    write_jsonl(p, ['{"a": "open'])
    with pytest.raises(DataError) as err:
        list(read_examples(p))
    assert str(err.value) == f"{p}:1: not a JSON object (Invalid control character at column 12)"
