"""Bad input through the command line, as a user meets it: one line naming the key, file or line, exit code 2, no
traceback (docs: "Bad input gets one clear line")."""

import pytest

from helpers.cli import run_script


@pytest.mark.parametrize("args, line", [
    (["model.path=/nonexistent/model"], "error: model.path=/nonexistent/model: no such file or folder"),
    (["dataset=jsonl"], "error: dataset.path: no value given; this option needs one (dataset.path=...)"),
])
def test_one_line_and_exit_2(tmp_path, args, line):
    out = run_script("run_exp.py", *args, "dry_run=true", cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == line
    assert "Traceback" not in out.stderr


def test_a_dry_run_sweep_checks_every_job_and_lists_the_refused(tmp_path):
    from helpers.paths import CACHE_DIR

    out = run_script("run_exp.py", "-m", "dry_run=true", "dataset=jsonl,morehopqa",
                     f"paths.model_cache_dir={CACHE_DIR}", cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    errors = [x for x in out.stderr.splitlines() if x.startswith("error: ")]
    assert len(errors) == 3 and "Traceback" not in out.stderr
    assert "0_dataset-jsonl" in errors[0] and "dataset.path: no value given" in errors[0]
    assert "1_dataset-morehopqa" in errors[1] and "no example has a target to explain" in errors[1]
    assert errors[2].startswith("error: dry run: 2 jobs of the sweep refused: outputs/multirun/run_exp/")


def _cache_rows(path, ids):
    import json

    rows = [{"prompt": f"p{i}", "target": "think\nans", "indices_to_explain": [2, 3], "attr_mask_indices": [0],
             "sink_span": [2, 3], "thinking_span": [0, 1], "metadata": {"id": i}} for i in ids]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("option, ids, tail", [
    ("cached", ["a", "b", "a"], ":3: field 'metadata.id': example id 'a' again (first at line 1); ids must be unique"),
    ("jsonl", ["a"], ":1: field 'input': missing field (a RULER row has input and outputs); this line is a "
                     "CachedExample (prompt, target): read such a cache with dataset=cached dataset.path=<file>"),
])
def test_a_cache_file_that_cannot_be_read_is_one_line(tmp_path, option, ids, tail):
    from helpers.paths import CACHE_DIR

    cache = _cache_rows(tmp_path / "c.jsonl", ids)
    out = run_script("run_exp.py", f"dataset={option}", f"dataset.path={cache}", "dataset.name=c", "dry_run=true",
                     f"paths.model_cache_dir={CACHE_DIR}", cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == f"error: {cache}{tail}" and "Traceback" not in out.stderr
