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
