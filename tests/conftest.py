"""Shared fixtures. The real SmolLM2 model loads once per session from the packaged GGUF, dequantised into a cache
outside the project (``CACHE_DIR``).

Tests neither read nor write the project's own data, caches or outputs (what a user's runs leave there must not
change a test's result, and a test must not change a user's results): every test runs in a temporary working
directory (so ``paths.root``, which defaults to the working directory, and Hydra's run folders are temporary), and
the session fails if anything under ``PROJECT_FOLDERS`` changed while it ran.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# dequantised models and embeddings: kept between sessions (dequantising SmolLM2 takes a while), never the project's
CACHE_DIR = Path(os.environ.get("CTXBENCH_TEST_CACHE") or Path(tempfile.gettempdir()) / "ctxbench-test-cache")
# where the stages write by default under the project root (paths group, Hydra's outputs) and the committed runs
PROJECT_FOLDERS = ("data", "exp/exp2/data", "outputs", ".cache", "runs")


def _state(folders=PROJECT_FOLDERS) -> dict[str, tuple[int, int]]:
    out = {}
    for name in folders:
        for p in (ROOT / name).rglob("*"):
            if p.is_file():
                st = p.stat()
                out[str(p.relative_to(ROOT))] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="session", autouse=True)
def project_folders_untouched(tmp_path_factory):
    """Module- and session-scoped fixtures start in a temporary folder too (they are set up before any test's own
    ``temporary_working_directory``): a relative default such as ``Paths().samples_dir`` never reaches the project."""
    before = _state()
    home = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(home)
    after = _state()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"the tests wrote into the project's own folders: {changed[:20]}"


@pytest.fixture(autouse=True)
def temporary_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def without_timings(obj):
    """A results record (or a part of one) without its timing fields (``*_s``, ``*timings``), which differ per run."""
    if isinstance(obj, dict):
        return {k: without_timings(v) for k, v in obj.items() if not (k.endswith("_s") or k.endswith("timings"))}
    if isinstance(obj, list):
        return [without_timings(v) for v in obj]
    return obj


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct (fp32, CPU, eager attention) as a LoadedLM."""
    from ctxbench.models import ModelConfig, load_causal_lm

    return load_causal_lm(ModelConfig(device="cpu", dtype="float32"), need_attentions=True, cache_dir=CACHE_DIR)


@pytest.fixture(scope="session")
def smol_tokenizer():
    from ctxbench.models import ModelConfig
    from ctxbench.models.causal_lm import load_tokenizer

    return load_tokenizer(ModelConfig(), cache_dir=CACHE_DIR)


@pytest.fixture(scope="session")
def morehopqa_path() -> Path:
    """The 150-row MoreHopQA sample shipped inside the package (a missing file is a failure, not a skip)."""
    from ctxbench.datasets import morehopqa_sample

    path = morehopqa_sample()
    assert path.is_file(), f"the packaged MoreHopQA sample is missing: {path}"
    return path
