"""scripts/install_chromium.sh (called by scripts/setup.sh): when chromium cannot be installed (no apt-get, not root
without password-less sudo, a failing install) it says what does not work and how to install it, and exits 0, so the
rest of the setup goes on. Run with a PATH of stand-ins: nothing is installed."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.paths import ROOT

SCRIPT = ROOT / "scripts" / "install_chromium.sh"
BASH = shutil.which("bash")


def _stub(bin_dir: Path, name: str, body: str) -> None:
    f = bin_dir / name
    f.write_text(f"#!{BASH}\n{body}\n")
    f.chmod(0o755)


def _run(tmp_path, *, uid: int, apt: str | None = None, sudo: str | None = None, chromium: bool = False,
         env: dict | None = None):
    """The script with only the stand-ins on PATH; ``apt``/``sudo``: their bodies (None: absent). Calls are logged."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    _stub(bin_dir, "id", f'echo "id $*" >> {log}; echo {uid}')
    os.symlink(shutil.which("env"), bin_dir / "env")
    if apt is not None:
        _stub(bin_dir, "apt-get", f'echo "apt-get $*" >> {log}; {apt}')
    if sudo is not None:
        _stub(bin_dir, "sudo", f'echo "sudo $*" >> {log}; {sudo}')
    if chromium:
        _stub(bin_dir, "chromium", "exit 0")
    out = subprocess.run([BASH, str(SCRIPT)], env={"PATH": str(bin_dir), **(env or {})}, capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    calls = log.read_text().splitlines() if log.exists() else []
    return out, [c for c in calls if not c.startswith("id ")]


def _says_what_and_how(out, reason: str) -> None:
    assert out.returncode == 0, out.stderr
    err = out.stderr
    assert f"chromium not installed: {reason}" in err
    assert "test_page_in_chromium" in err and "apt-get install chromium" in err  # what fails, how to install
    assert "CTXBENCH_SKIP_CHROMIUM=1" in err  # how to skip it


def test_setup_calls_the_chromium_step_and_nothing_else_installs_it():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    code = [line for line in setup.splitlines() if not line.lstrip().startswith("#")]
    assert "bash scripts/install_chromium.sh" in code and not any("apt-get" in line for line in code)


def test_no_apt_get(tmp_path):
    out, calls = _run(tmp_path, uid=0)
    _says_what_and_how(out, "apt-get not found")
    assert calls == []


@pytest.mark.parametrize("sudo", [None, "exit 1"], ids=["no sudo", "sudo asks for a password"])
def test_not_root_without_passwordless_sudo(tmp_path, sudo):
    out, calls = _run(tmp_path, uid=1000, apt="exit 0", sudo=sudo)
    _says_what_and_how(out, "not root and " + ("no sudo" if sudo is None else "sudo asks for a password"))
    assert not any(c.startswith("apt-get") for c in calls)  # nothing attempted without root


def test_failing_install(tmp_path):
    out, calls = _run(tmp_path, uid=0, apt='[ "$1" = update ] || [ "$3" = update ] || exit 100')
    _says_what_and_how(out, "apt-get install chromium failed")
    assert [c.split()[1] for c in calls] == ["update", "install"]


def test_installs_as_root_or_through_sudo(tmp_path):
    out, calls = _run(tmp_path, uid=0, apt="exit 0")
    assert out.returncode == 0 and out.stderr == ""
    assert calls == ["apt-get update -qq", "apt-get install -y -qq --no-install-recommends chromium"]
    sudo_dir = tmp_path / "sudo"
    sudo_dir.mkdir()
    out, calls = _run(sudo_dir, uid=1000, apt="exit 0", sudo='[ "$2" = true ] && exit 0; shift; exec "$@"')
    assert out.returncode == 0 and out.stderr == ""
    assert [c for c in calls if c.startswith("apt-get")] == ["apt-get update -qq",
                                                             "apt-get install -y -qq --no-install-recommends chromium"]


def test_present_or_skipped_does_nothing(tmp_path):
    out, calls = _run(tmp_path, uid=0, apt="exit 1", chromium=True)
    assert out.returncode == 0 and out.stderr == "" and calls == []
    skip = tmp_path / "skip"
    skip.mkdir()
    out, calls = _run(skip, uid=0, apt="exit 1", env={"CTXBENCH_SKIP_CHROMIUM": "1"})
    assert out.returncode == 0 and "chromium skipped" in out.stderr and calls == []
