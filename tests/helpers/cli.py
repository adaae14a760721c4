"""The stage scripts (``exp/exp2/<script>``) run as a user runs them: a child process of this Python, its output
captured. ``HYDRA_FULL_ERROR`` is left out of the child's environment unless asked for (``full_error``), so an error
ends as the user sees it: one ``error:`` line, exit code 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

from helpers.paths import ROOT

SCRIPTS = ROOT / "exp" / "exp2"


def script_argv(script: str, *args: str) -> list[str]:
    return [sys.executable, str(SCRIPTS / script), *args]


def script_env(env: Optional[dict] = None, *, full_error: bool = False, pythonpath: Optional[Path] = None) -> dict:
    """This process's environment without ``HYDRA_FULL_ERROR`` (set to 1 with ``full_error``), updated with ``env``;
    ``pythonpath``: a folder of plug-in modules put in front of ``PYTHONPATH``."""
    out = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    if full_error:
        out["HYDRA_FULL_ERROR"] = "1"
    if pythonpath is not None:
        out["PYTHONPATH"] = os.pathsep.join([str(pythonpath), os.environ.get("PYTHONPATH", "")])
    out.update(env or {})
    return out


def run_script(script: str, *args: str, cwd: Optional[Path] = None, env: Optional[dict] = None,
               full_error: bool = False, pythonpath: Optional[Path] = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``exp/exp2/<script> args`` to the end (in ``cwd``; by default the test's temporary working directory)."""
    return subprocess.run(script_argv(script, *args), cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=script_env(env, full_error=full_error, pythonpath=pythonpath))


def start_script(script: str, *args: str, cwd: Optional[Path] = None, env: Optional[dict] = None,
                 pythonpath: Optional[Path] = None, **popen) -> subprocess.Popen:
    """Start ``exp/exp2/<script> args`` in the background, to be interrupted by the test. SIGINT may be ignored by
    whatever started the tests (a background shell): the child gets its default handler back."""
    return subprocess.Popen(script_argv(script, *args), cwd=cwd, env=script_env(env, pythonpath=pythonpath),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **popen)
