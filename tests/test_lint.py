"""The lint configuration of pyproject.toml ([tool.ruff]: pyflakes and pycodestyle errors, 120 columns) holds for the
whole project: the test suite runs it, so CI does."""

import subprocess
import sys

from helpers.paths import ROOT


def test_ruff_finds_nothing():
    argv = [sys.executable, "-m", "ruff", "check", "--no-cache", "src", "tests", "bench", "scripts", "exp"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
