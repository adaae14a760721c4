"""Run manifests: secrets never written, provenance present."""

import json
import subprocess

from ctxbench.jobs.manifest import REDACTED, build_manifest, write_manifest

from helpers.paths import ROOT


def test_secrets_are_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_KEY_VAR", "sk-live-123456")
    config = {"model": {"api_key_env": "MY_KEY_VAR", "api_key": "sk-inline", "base_url": "http://h/v1?key=sk-live-123456"},
              "judge": {"model": {"token": "t0k"}}, "note": "uses sk-live-123456"}
    path = write_manifest(tmp_path, build_manifest(config, stage="test", root=ROOT))
    text = path.read_text()
    assert "sk-live-123456" not in text and "sk-inline" not in text and "t0k" not in text
    m = json.loads(text)
    assert m["config"]["model"]["api_key_env"] == "MY_KEY_VAR"  # the variable's name is not a secret
    assert m["config"]["model"]["api_key"] == REDACTED
    assert m["config"]["model"]["base_url"] == f"http://h/v1?key={REDACTED}"


def test_provenance(tmp_path):
    m = build_manifest({"a": 1}, stage="run_exp", root=ROOT, dataset={"sha256": "x"})
    assert m["stage"] == "run_exp" and m["dataset"] == {"sha256": "x"}
    assert m["versions"]["torch"].startswith("2.") and m["versions"]["python"].startswith("3.")
    assert "commit" in m["git"]
    assert build_manifest({}, stage="s", root=tmp_path)["git"] == {"commit": None}  # not a repository


def test_paths_inside_the_root_are_written_relative_to_it(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    config = {"paths": {"root": str(root), "data_dir": str(root / "data")}, "other": str(tmp_path / "elsewhere"),
              "prefix": str(root) + "2/x", "list": [str(root / "a.jsonl")]}
    m = build_manifest(config, stage="run_exp", root=root, dataset={"path": str(root / "data" / "t.jsonl")},
                       extra={"cache": str(root / "c.jsonl")})
    assert m["config"]["paths"] == {"root": ".", "data_dir": "data"}
    assert m["config"]["other"] == str(tmp_path / "elsewhere")  # outside the root: as it was
    assert m["config"]["prefix"] == str(root) + "2/x"  # a sibling folder whose name starts like the root's
    assert m["config"]["list"] == ["a.jsonl"] and m["dataset"]["path"] == "data/t.jsonl" and m["cache"] == "c.jsonl"


def _repo(root):
    """A committed repository with a source file and a committed result, as a Table-1 lane checkout has."""
    def git(*args):
        subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       capture_output=True)
    (root / "src").mkdir(parents=True)
    (root / "runs" / "lane").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x = 1\n")
    (root / "runs" / "lane" / "results.jsonl").write_text('{"row": 1}\n')
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "init")


def test_a_run_rewriting_its_own_committed_results_is_not_dirty(tmp_path):
    root = tmp_path / "project"
    _repo(root)
    lane = root / "runs" / "lane"
    clean = build_manifest({}, stage="run_exp", root=root, output_dir=lane)["git"]
    assert len(clean["commit"]) == 40 and clean == {"commit": clean["commit"], "dirty": False}
    (lane / "results.jsonl").write_text('{"row": 1}\n{"row": 2}\n')  # the lane resumed and appended a row
    assert build_manifest({}, stage="run_exp", root=root, output_dir=lane / "job")["git"]["dirty"] is False
    # the same change seen by a run writing elsewhere (outside the project, or the root itself) is a change
    for elsewhere in (None, tmp_path / "out", root):
        assert build_manifest({}, stage="s", root=root, output_dir=elsewhere)["git"] == {
            "commit": clean["commit"], "dirty": True, "modified": ["runs/lane/results.jsonl"]}
    (root / "src" / "a.py").write_text("x = 2\n")  # a source change always counts, and is named
    m = build_manifest({}, stage="run_exp", root=root, output_dir=lane)["git"]
    assert m["dirty"] is True and m["modified"] == ["src/a.py"]


def test_files_are_written_readable_as_open_would_make_them(tmp_path):
    """Every file the stages write goes through utils.files.atomic_write, whose temporary file is private (0600);
    the file put in place has the mode open() gives under the process's umask (manifest.json read 0600 before)."""
    import os
    import stat

    from ctxbench.utils.files import atomic_write_text

    old = os.umask(0o027)
    try:
        path = atomic_write_text(tmp_path / "manifest.json", "{}\n")
        assert stat.S_IMODE(path.stat().st_mode) == 0o640
        with open(tmp_path / "plain.txt", "w") as fp:  # the reference: what open() makes
            fp.write("x")
        assert stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode) == stat.S_IMODE(path.stat().st_mode)
    finally:
        os.umask(old)
