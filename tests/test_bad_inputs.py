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
