"""Approximate Faiss indexes of the dense retriever against exact search: recall@10 of IVF and HNSW at their default
settings on clustered random vectors, the flat index against brute-force numpy, settings checks, and the CPU
fallback of a GPU request."""

import logging

import numpy as np
import pytest

from ctxbench.retrievers.ann import IndexSettings, build_index, gpu_count


def clustered(n: int, dim: int, seed: int) -> np.ndarray:
    """Unit vectors around 200 shared centres, with noise wide enough that clusters overlap (so the approximate
    indexes miss some neighbours, as on real embeddings)."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(0).standard_normal((200, dim))
    x = centres[rng.integers(0, 200, n)] + 1.5 * rng.standard_normal((n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def exact_top(corpus: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-(queries @ corpus.T), axis=1, kind="stable")[:, :k]


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


@pytest.fixture(scope="module")
def data():
    corpus = clustered(20000, 64, 0)
    queries = clustered(200, 64, 1)
    return corpus, queries, exact_top(corpus, queries, 10)


def test_flat_is_exact(data):
    corpus, queries, truth = data
    scores, idx = build_index(corpus, IndexSettings("flat")).search(queries, 10)
    assert recall_at(idx, truth) == 1.0
    np.testing.assert_allclose(scores[:, 0], np.max(queries @ corpus.T, axis=1), rtol=1e-5)


@pytest.mark.parametrize("settings, floor", [
    (IndexSettings("ivf"), 0.9),  # nlist = min(4 sqrt(20000), 20000 / 39) = 512 cells, 32 visited
    (IndexSettings("hnsw"), 0.95),  # M = 32, efSearch = 128
    (IndexSettings("ivf", nprobe=128), 0.98),
    (IndexSettings("hnsw", ef_search=256), 0.98),
])
def test_approximate_recall_against_flat(data, settings, floor):
    corpus, queries, truth = data
    _, idx = build_index(corpus, settings).search(queries, 10)
    r = recall_at(idx, truth)
    print(f"\n{settings.index} nlist={settings.cells(len(corpus))} nprobe={settings.nprobe} "
          f"efSearch={settings.ef_search}: recall@10 = {r:.3f}")
    assert r >= floor


def test_more_probes_never_lose_recall(data):
    corpus, queries, truth = data
    recalls = [recall_at(build_index(corpus, IndexSettings("ivf", nlist=128, nprobe=p)).search(queries, 10)[1], truth)
               for p in (1, 8, 128)]
    assert recalls[0] < recalls[1] <= recalls[2] == 1.0  # all 128 cells visited = exhaustive


def test_ivf_cells_follow_the_corpus_size():
    assert IndexSettings("ivf").cells(20000) == 512  # 4 sqrt(n) = 565, capped at n / 39
    assert IndexSettings("ivf").cells(100) == 2  # at least 39 training points per cell
    assert IndexSettings("ivf").cells(10) == 1
    assert IndexSettings("ivf", nlist=4096).cells(20000) == 512
    assert IndexSettings("ivf").cells(10000) == 256  # 4 sqrt(n) = 400, capped at 10000 // 39


@pytest.mark.parametrize("kwargs, name", [({"index": "annoy"}, "index"), ({"device": "tpu"}, "device"),
                                          ({"nprobe": 0}, "nprobe"), ({"nlist": -1}, "nlist")])
def test_bad_settings_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}="):
        IndexSettings(**kwargs)


def test_gpu_request_falls_back_to_cpu_with_a_log_line(data, caplog):
    """faiss-cpu (what the tests run with) has no GPU support: device=cuda builds a CPU index and says so."""
    assert gpu_count() == 0, "this check is for CPU-only faiss; bench/gpu_check.sh covers the GPU"
    corpus, queries, truth = data
    with caplog.at_level(logging.INFO, logger="ctxbench.retrievers.ann"):
        index = build_index(corpus[:2000], IndexSettings("flat", device="cuda"))
    assert "stays on the CPU" in caplog.text and type(index).__name__ == "IndexFlatIP"


def test_dense_retriever_takes_the_index_options():
    from ctxbench.retrievers.dense import DenseRetriever

    r = DenseRetriever(index="hnsw", ef_search=128)
    assert r.index_settings == IndexSettings("hnsw", ef_search=128)
    with pytest.raises(ValueError, match="^index="):
        DenseRetriever(index="Flat")
