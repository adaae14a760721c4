"""Per-example traces: the hop vectors and ratios of a result in ``<dir>/<example_id>.npz`` plus one manifest line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ctxbench.attribution.base import AttributionResult
from ctxbench.utils.files import safe_filename


def save_trace(dir, example_id, result: AttributionResult, *, include_matrix: bool = False) -> dict:
    """Write the trace and append its manifest line to ``dir/manifest.jsonl``; returns that line (a dict)."""
    d = Path(dir)
    d.mkdir(parents=True, exist_ok=True)
    fname = f"ex_{safe_filename(example_id)}.npz"
    arrays = {"P": np.int64(result.P), "G": np.int64(result.G)}
    for key in ("hop_vectors", "observation_mask", "prompt_stop_mask", "gen_stop_mask", "rows_written"):
        val = getattr(result, key)
        if val is not None:
            arrays[key] = np.asarray(val)
    if result.rho is not None:
        arrays["rho"] = np.asarray(result.rho, dtype=np.float64)
    if include_matrix:
        arrays["matrix"] = result.matrix
    np.savez_compressed(d / fname, **arrays)
    line = {"example_id": example_id, "file": fname, "method": result.method, "P": result.P, "G": result.G,
            "hops": None if result.hop_vectors is None else int(result.hop_vectors.shape[0]) - 1,
            "rho": result.rho, "timings": result.timings}
    with open(d / "manifest.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
    return line


def load_trace(path) -> dict:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}
