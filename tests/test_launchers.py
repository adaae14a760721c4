"""The same run_exp sweep through Hydra's launchers (joblib, a local Ray cluster started by the sweep, submitit's local
executor) writes the same job dirs and the same results as the serial sweep (timings aside), and under each the sweep
is one MLflow parent run with a child run per job (logger=mlflow, a SQLite store per sweep)."""

import json

import pytest

from helpers.cli import run_script
from helpers.paths import CACHE_DIR
from helpers.records import without_timings

SWEEP = ["dataset=niah_single_1,niah_mq_q2", "attribution=random", "mode=recovery", "max_examples=2", "length=512",
         "dataset.num_samples=2", "html=false", "progress=false", "heatmaps=0"]
LAUNCHERS = {
    "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    "ray": ["hydra/launcher=ray_local", "hydra.launcher.ray.init.num_cpus=2"],
    "submitit_local": ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"],
}


def sweep(tmp_path, name: str, launcher: list[str]) -> dict:
    """Run the sweep into tmp_path/name; return {job dir name: results without timings}."""
    out = tmp_path / name
    uri = f"sqlite:///{tmp_path / (name + '.db')}"
    proc = run_script("run_exp.py", "-m", *SWEEP, *launcher, f"hydra.sweep.dir={out}", "logger=mlflow",
                      f"logger.mlflow.tracking_uri={uri}",
                      f"paths.data_dir={tmp_path / 'data'}", f"paths.model_cache_dir={CACHE_DIR}",
                      f"paths.samples_dir={tmp_path / 'samples'}", cwd=tmp_path, env={"OMP_NUM_THREADS": "1"},
                      full_error=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("run_exp").experiment_id])
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert [r.info.run_name for r in parent] == [name] and all(r.info.status == "FINISHED" for r in runs)
    children = sorted(r.info.run_name for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id)
    assert children == sorted(p.name for p in out.iterdir() if p.is_dir() and p.name[0].isdigit())  # (.submitit)
    jobs = {}
    for results in sorted(out.glob("*/results.jsonl")):
        jobs[results.parent.name] = [without_timings(json.loads(line)) for line in results.read_text().splitlines()]
    return jobs


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The serial sweep; it also generates the two tasks' data, which the launched sweeps then share."""
    tmp = tmp_path_factory.mktemp("sweeps")
    jobs = sweep(tmp, "serial", [])
    assert len(jobs) == 2 and [name.split("_")[0] for name in jobs] == ["0", "1"]
    assert all(len(lines) == 2 for lines in jobs.values())
    return tmp, jobs


@pytest.mark.slow
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_launched_sweep_equals_serial(serial, launcher):
    tmp, expected = serial
    assert sweep(tmp, launcher, LAUNCHERS[launcher]) == expected
