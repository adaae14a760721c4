"""Shared caches made once when 3 processes need them at the same moment (ctxbench.utils.locks): the maker runs once,
every process gets the same, complete result, and nothing half-written is left beside the cache."""

import hashlib
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.paths import CACHE_DIR

# Each child imports, prepares, says it is ready, waits for "go" (so the three first uses overlap), then runs the first
# use with the maker wrapped to append a line to calls.txt, and prints the sha256 of what it got.
CHILD = textwrap.dedent("""
    import hashlib, sys, time
    from pathlib import Path
    tmp, me = Path(sys.argv[1]), sys.argv[2]

    def counted(module, name):
        inner = getattr(module, name)
        def wrapper(*a, **k):
            with open(tmp / "calls.txt", "a") as f:
                f.write(me + "\\n")
            time.sleep(0.5)  # widen the window in which a second maker would start
            return inner(*a, **k)
        setattr(module, name, wrapper)

    {setup}
    (tmp / f"ready-{{me}}").touch()
    while not (tmp / "go").exists():
        time.sleep(0.01)
    {use}
    print("SHA", hashlib.sha256(result).hexdigest())
""")


def run_three(tmp_path: Path, setup: str, use: str, timeout: int = 300) -> set[str]:
    """Start 3 children, release them together, and return the set of digests they printed (one line each)."""
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(setup=textwrap.dedent(setup).strip(), use=textwrap.dedent(use).strip()))
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path), str(i)], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    deadline = time.time() + timeout
    while len(list(tmp_path.glob("ready-*"))) < 3:
        assert time.time() < deadline, "children did not get ready"
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
        time.sleep(0.05)
    (tmp_path / "go").touch()
    digests = set()
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err[-3000:]
        digests |= {line.split()[1] for line in out.splitlines() if line.startswith("SHA ")}
    return digests


def calls(tmp_path: Path) -> list[str]:
    f = tmp_path / "calls.txt"
    return f.read_text().split() if f.exists() else []


def test_create_once_three_processes_one_maker(tmp_path):
    """The lock itself, with a maker that writes in pieces: one maker, one whole file, the same bytes for all."""
    setup = """
        import ctxbench.utils.locks as locks
        target = tmp / "cache" / "blob.bin"
        def make():
            target.parent.mkdir(exist_ok=True)
            part = target.with_name("blob.bin.part")
            with open(part, "wb") as f:
                for i in range(20):
                    f.write(bytes([i]) * 1000)
                    f.flush()
                    time.sleep(0.02)
            part.replace(target)
            return target.read_bytes()
        class Maker:
            make = staticmethod(make)
        counted(Maker, "make")
    """
    use = """
        result = locks.create_once(target, lambda: target.read_bytes() if target.exists() else None, Maker.make)
    """
    digests = run_three(tmp_path, setup, use, timeout=120)
    expected = b"".join(bytes([i]) * 1000 for i in range(20))
    assert digests == {hashlib.sha256(expected).hexdigest()}
    assert len(calls(tmp_path)) == 1
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["blob.bin", "blob.bin.lock"]


def test_create_once_reuses_without_locking(tmp_path):
    from ctxbench.utils.locks import create_once, lock_path

    target = tmp_path / "x"
    assert create_once(target, lambda: "there", lambda: pytest.fail("must not make")) == "there"
    assert not lock_path(target).exists()
    assert create_once(target, lambda: None, lambda: "made") == "made"


@pytest.mark.slow
def test_dequantised_model_made_once(tmp_path):
    """3 first loads of the GGUF model into an empty cache dir: one dequantisation, one complete copy."""
    setup = """
        from ctxbench.models import ModelConfig
        from ctxbench.models import causal_lm
        counted(causal_lm, "_dequantize_to_cache")
    """
    use = """
        tok = causal_lm.load_tokenizer(ModelConfig(), cache_dir=tmp / "cache")
        folder = next((tmp / "cache" / "dequantized").glob("*-tf*[0-9]"))
        result = (folder / "model.safetensors").read_bytes() + str(tok("the needle")["input_ids"]).encode()
    """
    digests = run_three(tmp_path, setup, use)
    assert len(digests) == 1 and len(calls(tmp_path)) == 1
    entries = sorted(p.name for p in (tmp_path / "cache" / "dequantized").iterdir())
    assert len(entries) == 2 and entries[1] == entries[0] + ".lock", entries  # no temporary folder left
    from safetensors.numpy import load_file

    # The copy is whole: the same tensors as the one the other tests use.
    mine = load_file(tmp_path / "cache" / "dequantized" / entries[0] / "model.safetensors")
    ref = load_file(CACHE_DIR / "dequantized" / entries[0] / "model.safetensors")  # same GGUF, same key
    assert mine.keys() == ref.keys() and all(np.array_equal(mine[k], ref[k]) for k in ref)


@pytest.mark.slow
def test_corpus_embeddings_made_once(tmp_path):
    """3 jobs encoding the same corpus into an empty embedding cache: one encoding; every job gets those vectors."""
    texts = [f"document {i} about topic {i % 7}" for i in range(40)]
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    setup = """
        import json
        import numpy as np
        from ctxbench.models import embedder
        counted(embedder.Embedder, "encode")
        texts = json.loads((tmp / "texts.json").read_text())
        emb = embedder.Embedder(device="cpu", cache_dir=str(tmp / "cache"))
        emb.load()
    """
    use = """
        result = np.ascontiguousarray(emb.encode_corpus(texts)).tobytes()
    """
    digests = run_three(tmp_path, setup, use)
    assert len(digests) == 1 and len(calls(tmp_path)) == 1
    from ctxbench.models.embedder import Embedder

    direct = Embedder(device="cpu").encode(texts, 256)
    (npy,) = (tmp_path / "cache").rglob("embeddings.npy")
    cached = np.load(npy)
    np.testing.assert_allclose(cached, direct, atol=1e-5)
    assert sorted(p.name for p in npy.parent.iterdir()) == ["embeddings.npy", "key.json"]


@pytest.mark.slow
def test_ruler_task_generated_once(tmp_path, smol_tokenizer):
    """3 jobs needing the same RULER task file: one generation; the file equals one generated alone."""
    setup = f"""
        from ctxbench.datasets.base import Paths
        from ctxbench.datasets import ruler_task
        from ctxbench.models import ModelConfig
        from ctxbench.models.causal_lm import load_tokenizer
        counted(ruler_task, "write_task")
        tok = load_tokenizer(ModelConfig(), cache_dir={str(CACHE_DIR)!r})
        task = ruler_task.RulerTask(name="niah_single_1", length=512, num_samples=3)
    """
    use = """
        result = task.raw_path(Paths(data_dir=str(tmp / "data")), tok).read_bytes()
    """
    digests = run_three(tmp_path, setup, use)
    assert len(calls(tmp_path)) == 1
    from ctxbench.datasets.base import Paths
    from ctxbench.datasets.ruler_task import RulerTask

    alone = RulerTask(name="niah_single_1", length=512, num_samples=3).raw_path(
        Paths(data_dir=str(tmp_path / "alone")), smol_tokenizer).read_bytes()
    assert digests == {hashlib.sha256(alone).hexdigest()} and len(alone.splitlines()) == 3
    folder = tmp_path / "data" / "ruler_multihop" / "512" / "niah_single_1"
    assert sorted(p.name for p in folder.iterdir()) == ["validation.jsonl", "validation.jsonl.lock"]
