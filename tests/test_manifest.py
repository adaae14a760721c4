"""Run manifests: secrets never written, provenance present."""

import json

from ctxbench.manifest import REDACTED, build_manifest, write_manifest

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
