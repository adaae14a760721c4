"""A real browser for page checks: Debian's chromium (installed by scripts/setup.sh), driven by playwright."""

from __future__ import annotations

import shutil

# no sandbox (CI runs as root), and none of chromium's own network traffic on this closed machine
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Debian's chromium is not installed: run `bash scripts/setup.sh` (it installs it with apt-get)"
    return path
