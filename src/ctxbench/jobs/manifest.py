"""Run manifests: what produced a result (config with secrets redacted, git commit, package versions, data
fingerprint)."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

from ctxbench.utils.files import atomic_write_text

SECRET_KEY = re.compile(r"(api_?key|secret|password|passwd|token|authorization)$", re.IGNORECASE)
REDACTED = "***REDACTED***"
# Stage keys that never change a result: where files live, how progress is shown, extra artefacts, summary statistics
# (the parts' own such keys are declared neutral on their fields: ctxbench.core.part).
NEUTRAL_PREFIXES = ("paths.", "dry_run", "progress", "heatmaps", "html", "save_traces", "stats.", "resume",
                    "endpoint.")
PACKAGES = ("ctxbench", "torch", "transformers", "tokenizers", "hydra-core", "omegaconf", "numpy", "faiss-cpu",
            "pytrec-eval-terrier", "jsonlines", "pysbd")


def redact(obj: Any, secrets: tuple[str, ...] = ()) -> Any:
    """Copy of ``obj`` with secret-looking keys and any known secret value replaced. ``api_key_env`` (a variable *name*)
    is kept; the values of the variables it names are passed in ``secrets`` and scrubbed wherever they appear."""
    if isinstance(obj, dict):
        return {k: (REDACTED if SECRET_KEY.search(str(k)) and v is not None else redact(v, secrets))
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v, secrets) for v in obj]
    if isinstance(obj, str):
        for s in secrets:
            if s and s in obj:
                obj = obj.replace(s, REDACTED)
    return obj


def env_secrets(cfg: Any) -> tuple[str, ...]:
    """Values of every environment variable that the config names through an ``api_key_env`` key."""
    found = []

    def walk(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k == "api_key_env" and isinstance(v, str) and os.environ.get(v):
                    found.append(os.environ[v])
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(cfg)
    return tuple(found)


def results_folder(root: str | Path, output_dir: Optional[str | Path]) -> Optional[str]:
    """The top-level folder of ``root`` that ``output_dir`` lies in (``runs``, ``outputs``), or None when the run
    writes outside the project or into its root itself."""
    if output_dir is None:
        return None
    try:
        rel = Path(output_dir).resolve().relative_to(Path(root).resolve())
    except ValueError:
        return None
    return rel.parts[0] if rel.parts else None


def git_state(root: str | Path, output_dir: Optional[str | Path] = None) -> dict[str, Any]:
    """HEAD's commit and whether tracked files differ from it. Files under the folder the run writes its results
    into do not count: a resumed lane rewrites its own committed results (runs/table1/...), which is not a change
    to what produced them. ``modified`` names the first changed files of a dirty tree."""
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return {"commit": None}
        folder = results_folder(root, output_dir)
        spec = ["--", ".", f":(exclude){folder}"] if folder else []
        # tracked files differing from HEAD, staged or not, by name (no status columns to strip)
        changed = git("diff", "--name-only", "HEAD", *spec).stdout.splitlines()
        state: dict[str, Any] = {"commit": head.stdout.strip(), "dirty": bool(changed)}
        if changed:
            state["modified"] = changed[:20]
        return state
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None}


def package_versions() -> dict[str, Optional[str]]:
    out: dict[str, Optional[str]] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def relative_to_root(obj: Any, root: str | Path) -> Any:
    """``obj`` with every absolute path string inside the project root written relative to it (the root itself as
    "."): a manifest committed with its results names no machine's folders."""
    top = str(Path(root).resolve())
    if isinstance(obj, dict):
        return {k: relative_to_root(v, top) for k, v in obj.items()}
    if isinstance(obj, list):
        return [relative_to_root(v, top) for v in obj]
    if isinstance(obj, str) and obj.startswith(top) and (len(obj) == len(top) or obj[len(top)] == os.sep):
        return os.path.relpath(obj, top)
    return obj


def build_manifest(config: dict[str, Any], *, stage: str, root: str | Path, output_dir: Optional[str | Path] = None,
                   dataset: Optional[dict[str, Any]] = None, extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The manifest of a run writing into ``output_dir`` (its folder is left out of the git dirty check)."""
    return {
        "stage": stage,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "argv": redact(list(sys.argv), env_secrets(config)),
        "config": relative_to_root(redact(config, env_secrets(config)), root),
        "git": git_state(root, output_dir),
        "versions": package_versions(),
        "dataset": relative_to_root(dataset or {}, root),
        **relative_to_root(extra or {}, root),
    }


# what differs between two runs of the same job that changed nothing: when, and at which commit, it was written
VOLATILE = ("created", "git")


def write_manifest(output_dir: str | Path, manifest: dict[str, Any], name: str = "manifest.json",
                   refresh: bool = False) -> Path:
    """Write the job's manifest. A manifest already there that differs only in when and at which commit it was
    written (``VOLATILE``) is kept, so that a rerun finding nothing to do changes no committed file; ``refresh``
    rewrites it anyway (the run has just added results, made at this commit)."""
    path = Path(output_dir) / name
    if not refresh and path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = None
        if isinstance(old, dict) and _stable(old) == _stable(json.loads(json.dumps(manifest, default=str))):
            return path
    return atomic_write_text(path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


def _stable(manifest: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in manifest.items() if k not in VOLATILE}
