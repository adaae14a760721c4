"""Shared fixtures. The real SmolLM2 model loads once per session from the packaged GGUF, dequantised into a cache
outside the project (``CACHE_DIR``).

Tests neither read nor write the project's own data, caches or outputs (what a user's runs leave there must not
change a test's result, and a test must not change a user's results): every test runs in a temporary working
directory (so ``paths.root``, which defaults to the working directory, and Hydra's run folders are temporary), and
the session fails if anything under ``PROJECT_FOLDERS`` changed while it ran.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Shared helpers live in tests/helpers/ (a test imports them from there, not from this file).
from helpers.paths import CACHE_DIR, ROOT

# pytest-xdist workers (addopts: one per core, at most 4) share the cores: each worker's torch, and the stages its
# tests start as subprocesses (they inherit the environment), take an equal share instead of every core each
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_NUM_THREADS",
                          str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))
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


@pytest.fixture
def server(monkeypatch):
    """A local chat-completions server (helpers.chat_server), the key in ``KEY_ENV``."""
    from helpers.chat_server import KEY, KEY_ENV, ChatServer

    monkeypatch.setenv(KEY_ENV, KEY)
    s = ChatServer()
    yield s
    s.close()
