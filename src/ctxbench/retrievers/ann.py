"""The Faiss index of a dense retriever (inner product): exact ``flat``, or approximate ``ivf`` / ``hnsw`` for large
corpora, on CPU or on a GPU when the installed faiss has GPU support (docs/scale-out.md#indexes).

- ``flat``: exhaustive, exact.
- ``ivf``: ``nlist`` k-means cells (0: about 4·sqrt(n), capped so each cell has 39 training points, Faiss's minimum
  for a stable k-means); a query visits ``nprobe`` cells.
- ``hnsw``: a graph of ``hnsw_m`` links per node, built with ``ef_construction`` and searched with ``ef_search``
  candidates. Faiss has no GPU HNSW: on a GPU request it stays on the CPU (logged).

``device``: ``cpu``, ``cuda`` (GPU 0) or ``auto`` (a GPU when faiss has one); without GPU support the index stays on
the CPU with a log line. Recall against ``flat``: tests/test_ann_index.py and bench/bench_ann_index.py.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from ctxbench.core.part import check_params, param, refuse

log = logging.getLogger(__name__)

INDEX_KINDS = ("flat", "ivf", "hnsw")
DEVICES = ("cpu", "cuda", "auto")
_GPU_RESOURCES: dict = {}


@dataclass(frozen=True)
class IndexSettings:
    index: str = param("flat", choices=INDEX_KINDS)
    nlist: int = param(0, ge=0)  # 0: chosen from the corpus size
    nprobe: int = param(32, ge=1)
    hnsw_m: int = param(32, ge=1)
    ef_construction: int = param(80, ge=1)
    ef_search: int = param(128, ge=1)
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_params(self)  # not a part, built by the dense retriever from its own fields
        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise refuse("device", self.device, "expected cpu, cuda, cuda:N or auto")

    def cells(self, n: int) -> int:
        """IVF cells for ``n`` vectors."""
        want = self.nlist or int(4 * math.sqrt(n))
        return max(1, min(want, n // 39 or 1))


def gpu_count() -> int:
    import faiss

    return faiss.get_num_gpus() if hasattr(faiss, "StandardGpuResources") else 0


def build_index(emb: np.ndarray, settings: IndexSettings):
    """A trained Faiss index holding ``emb`` (float32, ``(n, dim)``)."""
    import faiss

    n, dim = emb.shape
    if settings.index == "flat":
        index = faiss.IndexFlatIP(dim)
    elif settings.index == "ivf":
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, settings.cells(n), faiss.METRIC_INNER_PRODUCT)
        index.nprobe = min(settings.nprobe, settings.cells(n))
    else:
        index = faiss.IndexHNSWFlat(dim, settings.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = settings.ef_construction
        index.hnsw.efSearch = settings.ef_search
    index = _to_device(index, settings)
    if not index.is_trained:
        index.train(emb)
    index.add(emb)
    return index


def _to_device(index, settings: IndexSettings):
    if settings.device == "cpu":
        return index
    gpus = gpu_count()
    if gpus == 0:
        log.info("faiss: no GPU support in this build (or no GPU); the %s index stays on the CPU", settings.index)
        return index
    if settings.index == "hnsw":
        log.info("faiss: HNSW has no GPU implementation; the index stays on the CPU")
        return index
    import faiss

    gpu = int(settings.device.split(":")[1]) if ":" in settings.device else 0
    if gpu not in _GPU_RESOURCES:  # created once per GPU (they hold scratch memory) and kept alive for the indexes
        _GPU_RESOURCES[gpu] = faiss.StandardGpuResources()
    moved = faiss.index_cpu_to_gpu(_GPU_RESOURCES[gpu], gpu, index)
    if settings.index == "ivf":
        moved.nprobe = index.nprobe
    log.info("faiss: %s index on GPU %d", settings.index, gpu)
    return moved
