"""The cgroup headroom (ctxbench.utils.cgroup) on hand-made cgroup file systems of both versions, and free_bytes taking
it where it is below the host's available memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxbench.attribution import memory
from ctxbench.utils.cgroup import memory_headroom

MIB = 2 ** 20


def write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text)


def proc(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "proc_cgroup"
    p.write_text(text)
    return p


def test_v2_the_tightest_of_the_group_and_its_ancestors(tmp_path):
    root = tmp_path / "fs"
    write(root, cgroup_controllers="memory pids\n")
    # the job's slice: 8 GiB, 3 GiB used of which 1 GiB inactive file cache -> 6 GiB
    write(root / "batch", memory_max=str(8192 * MIB), memory_current=str(3072 * MIB),
          memory_stat=f"anon 100\ninactive_file {1024 * MIB}\nactive_file 5\n")
    # the job itself: no limit of its own
    write(root / "batch" / "job7", memory_max="max", memory_current=str(2048 * MIB), memory_stat="inactive_file 0\n")
    got = memory_headroom(root, proc(tmp_path, "0::/batch/job7\n"))
    assert got == (8192 - 3072 + 1024) * MIB
    # a tighter limit on the job wins: 4 GiB - 2 GiB
    (root / "batch" / "job7" / "memory.max").write_text(str(4096 * MIB))
    assert memory_headroom(root, proc(tmp_path, "0::/batch/job7\n")) == 2048 * MIB


def test_v1_memory_controller_and_a_container_seeing_its_group_as_the_root(tmp_path):
    root = tmp_path / "fs"
    # inside a container the recorded path is the host's; the mount's root is the container's group
    write(root / "memory", memory_limit_in_bytes=str(2048 * MIB), memory_usage_in_bytes=str(1536 * MIB),
          memory_stat=f"cache 7\ntotal_inactive_file {256 * MIB}\n")
    text = "9:name=systemd:/\n4:memory:/process_api/3f3e\n3:cpuset:/\n0::/\n"
    assert memory_headroom(root, proc(tmp_path, text)) == (2048 - 1536 + 256) * MIB


@pytest.mark.parametrize("limit", ["9223372036854771712", "max"])
def test_no_limit_is_none(tmp_path, limit):
    root = tmp_path / "fs"
    write(root / "memory", memory_limit_in_bytes=limit, memory_usage_in_bytes="123")
    assert memory_headroom(root, proc(tmp_path, "4:memory:/\n")) is None


def test_no_cgroup_file_system_is_none(tmp_path):
    assert memory_headroom(tmp_path / "absent", tmp_path / "no_proc_file") is None
    assert memory_headroom(tmp_path / "absent", proc(tmp_path, "0::/\n")) is None


def test_this_machine_reads_without_error():
    got = memory_headroom()
    assert got is None or got >= 0


def test_free_bytes_takes_the_cgroup_headroom_where_it_is_lower(monkeypatch):
    import psutil

    host = psutil.virtual_memory().available
    monkeypatch.setattr(memory, "memory_headroom", lambda: 512 * MIB)
    assert memory.free_bytes("cpu") == (512 * MIB, "memory this process's cgroup (container) limit leaves")
    monkeypatch.setattr(memory, "memory_headroom", lambda: host * 4)
    free, where = memory.free_bytes("cpu")
    assert where == "memory available on the host" and free > 512 * MIB
    monkeypatch.setattr(memory, "memory_headroom", lambda: None)
    assert memory.free_bytes("cpu")[1] == "memory available on the host"

