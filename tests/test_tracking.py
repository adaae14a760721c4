"""Experiment trackers (the ``logger`` group) and optimising sweeps (``objective``, ``hydra/sweeper=optuna``).

The real packages: MLflow's client and server (read back with ``MlflowClient``, and the server's page opened in
chromium), TensorBoard's event reader, wandb's offline runs, Hydra's Optuna sweeper. The jobs are small run_exp
jobs (the random baseline scored for recovery on two generated RULER examples) and BM25 on a 400-document slice of
the Wikipedia demo set."""

from __future__ import annotations

import csv
import io
import json
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from ctxbench.core.errors import ConfigError
from ctxbench.tracking.base import JobInfo, Tracker
from ctxbench.tracking.csv import sweep_row
from ctxbench.tracking.objective import objective_direction, objective_value, with_sweeper_defaults
from ctxbench.tracking.record import JobRecord, flatten, job_record, metric_name
from ctxbench.tracking.session import JobTracking
from helpers.cli import run_script
from helpers.paths import CACHE_DIR

# stats.min_n=1: summaries carry intervals only from min_n examples on, and these tests check the logged bounds
JOB = ["attribution=random", "mode=recovery", "max_examples=2", "length=512", "dataset.num_samples=2", "html=false",
       "progress=false", "heatmaps=0", "stats.min_n=1"]
SWEEP = ["-m", "dataset=niah_single_1,niah_mq_q2", *JOB]
RETRIEVAL = ["mode=retrieval", "dataset=wiki_demo", "dataset.n_docs=400", "dataset.n_queries=60", "retriever=bm25",
             "progress=false"]


def paths(tmp_path: Path) -> list[str]:
    return [f"paths.data_dir={tmp_path / 'data'}", f"paths.model_cache_dir={CACHE_DIR}",
            f"paths.samples_dir={tmp_path / 'samples'}"]


def sqlite_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def mlflow_args(uri: str) -> list[str]:
    return ["logger=mlflow", f"logger.mlflow.tracking_uri={uri}"]


def runs_of(uri: str, experiment: str = "run_exp"):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    return client, (client.search_runs([exp.experiment_id]) if exp else [])


def summary_figures(summary: dict) -> dict[str, float]:
    """The means and interval bounds of a run_exp summary.json, walked here independently of the tracker's code."""
    out = {}
    for method, ms in summary["methods"].items():
        for scorer in summary["scorers"]:
            for view, metrics in ms[scorer].items():
                for metric, stat in metrics.items():
                    if stat["mean"] is None:  # a set this run did not score (RISE@nonstop of a method without it)
                        continue
                    # RISE+AP, RISE@nonstop: the names the tracking docs give them
                    metric = metric.replace("+", "_").replace("@", "_at_")
                    out[f"{method}/{scorer}/{view}/{metric}"] = stat["mean"]
                    out[f"{method}/{scorer}/{view}/{metric}/ci_low"] = stat["ci_low"]
                    out[f"{method}/{scorer}/{view}/{metric}/ci_high"] = stat["ci_high"]
    return out


# --- the record, the objective, the sweep table (no tracker) ---------------------------------------------------------

def make_job(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "config.yaml").write_text("a: 1\n")
    stat = {"mean": 0.25, "std": 0.1, "n": 2, "ci_low": 0.2, "ci_high": 0.3}
    (job / "summary.json").write_text(json.dumps({
        "methods": {"ifr": {"examples": 2, "avg_attribution_s": 1.5,
                            "faithfulness": {"row": {"RISE": stat, "RISE+AP": {**stat, "mean": 0.5},
                                                     "MAS@nonstop": {**stat, "mean": 0.75}}}}},
        "scorers": {"faithfulness": {}}, "views": ["row"]}))
    (job / "manifest.json").write_text(json.dumps({
        "config": {"dataset": {"name": "d", "num": 3}, "attribution": {"ifr": {"hops": [1, 2]}}, "x": None,
                   "mode": {"faithfulness": {}}},
        "git": {"commit": "abc", "dirty": True}, "dataset": {"name": "d", "sha256": "f00"}}))
    (job / "results.jsonl").write_text("")
    (job / "results.jsonl.lock").write_text("")
    (job / "tracking.json").write_text("{}")
    return job


def test_record_of_a_job_folder(tmp_path):
    rec = job_record(make_job(tmp_path), "run_exp")
    assert rec.params == {"dataset.name": "d", "dataset.num": "3", "attribution.ifr.hops": "[1, 2]", "x": "null"}
    assert rec.tags == {"stage": "run_exp", "git_commit": "abc-dirty", "dataset": "d", "dataset_sha256": "f00",
                        "mode": "faithfulness"}
    assert rec.metrics == {"ifr/examples": 2.0, "ifr/avg_attribution_s": 1.5,
                           "ifr/faithfulness/row/RISE": 0.25, "ifr/faithfulness/row/RISE/ci_low": 0.2,
                           "ifr/faithfulness/row/RISE/ci_high": 0.3,
                           "ifr/faithfulness/row/RISE_AP": 0.5, "ifr/faithfulness/row/RISE_AP/ci_low": 0.2,
                           "ifr/faithfulness/row/RISE_AP/ci_high": 0.3,
                           "ifr/faithfulness/row/MAS_at_nonstop": 0.75,
                           "ifr/faithfulness/row/MAS_at_nonstop/ci_low": 0.2,
                           "ifr/faithfulness/row/MAS_at_nonstop/ci_high": 0.3}
    # the lock and the trackers' own state are not artifacts
    assert [p.as_posix() for p in rec.artifacts] == ["manifest.json", "results.jsonl", "summary.json",
                                                      ".hydra/config.yaml"]
    assert flatten({"a": {"b": [1, {"c": 2}]}}) == {"a.b": '[1, {"c": 2}]'}
    assert metric_name("m", "x", "RISE+AP") == "m/x/RISE_AP"


def test_objective_value_and_direction(tmp_path):
    rec = job_record(make_job(tmp_path), "run_exp")
    assert objective_value("faithfulness.row.RISE", rec) == 0.25
    assert objective_value("ifr.faithfulness.row.RISE+AP", rec) == 0.5
    assert objective_value("faithfulness.row.MAS@nonstop", rec) == 0.75
    two = JobRecord(tmp_path, "run_exp", metrics={"a/recovery/row/recall": 0.1, "b/recovery/row/recall": 0.2})
    with pytest.raises(ConfigError, match="several methods .a, b.; name one, e.g. objective=a.recovery.row.recall"):
        objective_value("recovery.row.recall", two)
    with pytest.raises(ConfigError, match="not among the job's metrics"):
        objective_value("recovery.row.nope", two)
    faith = {"faithfulness": {"_target_": "ctxbench.metrics.faithfulness.FaithfulnessScorer"},
             "recovery": {"_target_": "ctxbench.metrics.recovery.RecoveryScorer"}}
    assert objective_direction("faithfulness.row.RISE", faith) == "minimize"  # the scorer says lower is better
    assert objective_direction("ifr.faithfulness.row.MAS", faith) == "minimize"
    assert objective_direction("recovery.row.recall", faith) == "maximize"
    assert objective_direction("retrieval.ndcg_at_10") == "maximize"
    assert objective_direction("funnel.kept") == "maximize"
    assert objective_direction("funnel.rejections.malformed") == "minimize"
    with pytest.raises(ConfigError, match="mode faithfulness has no metric Nope"):
        objective_direction("faithfulness.row.Nope", faith)
    with pytest.raises(ConfigError, match="no selected mode"):
        objective_direction("coverage.row.x", faith)
    args = ["-m", "hydra/sweeper=optuna", "objective=funnel.kept"]
    assert with_sweeper_defaults(args)[3:] == ["hydra.sweeper.direction='${ctxbench.objective_direction:${objective}}'",
                                               "hydra.sweeper.max_failure_rate=1.0"]
    given = with_sweeper_defaults([*args, "hydra.sweeper.direction=minimize"])
    assert given[3:] == ["hydra.sweeper.direction=minimize", "hydra.sweeper.max_failure_rate=1.0"]
    assert with_sweeper_defaults(["-m", "a=1,2"]) == ["-m", "a=1,2"]


def test_sweep_table_has_one_row_per_job(tmp_path):
    path = tmp_path / "metrics.csv"
    sweep_row(path, "0_a", {"m/x": 1.0})
    sweep_row(path, "1_b", {"m/y": 2.5})
    sweep_row(path, "0_a", {"m/x": 3.0})  # a resumed job replaces its row
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert rows == [{"job": "0_a", "m/x": "3.0", "m/y": ""}, {"job": "1_b", "m/x": "", "m/y": "2.5"}]


@dataclass
class Flaky(Tracker):
    """A tracker that fails where told to (``fail_in``) and otherwise records what it was given."""

    name: ClassVar[str] = "flaky"
    fail_in: str = ""

    def __post_init__(self) -> None:
        self.calls: list = []

    def start(self, job, state):
        if self.fail_in == "start":
            raise RuntimeError("cannot start")
        self.calls.append(("start", state))
        return {"n": len(self.calls)}

    def log(self, record):
        if self.fail_in == "log":
            raise RuntimeError("cannot log\nsecond line")
        self.calls.append(("log", sorted(record.metrics)))

    def finish(self, status):
        self.calls.append(("finish", status))


def test_session_opens_continues_and_closes_runs(tmp_path, caplog):
    job = make_job(tmp_path)
    info = JobInfo(job, "run_exp")
    t = Flaky()
    session = JobTracking({"flaky": t}, info, lambda: job_record(job, "run_exp"))
    assert session.end("FAILED") is None and t.calls == []  # never accepted: no run, nothing logged
    session.start()
    assert json.loads((job / "tracking.json").read_text())["flaky"] == {"n": 1}
    record = session.end("FINISHED")
    assert record.metrics["ifr/faithfulness/row/RISE"] == 0.25
    assert t.calls == [("start", None), ("log", sorted(record.metrics)), ("finish", "FINISHED")]
    again = Flaky()
    JobTracking({"flaky": again}, info, lambda: record).start()  # a resumed job: its state is handed back
    assert again.calls == [("start", {"n": 1})]
    # a tracker that fails: one line naming it (the job's files are kept), or a warning when best effort
    with pytest.raises(ConfigError, match=r"^logger.flaky: RuntimeError: cannot start \(the job's files are in"):
        JobTracking({"flaky": Flaky(fail_in="start")}, info, lambda: record).start()
    lenient = JobTracking({"flaky": Flaky(fail_in="log", best_effort=True)}, info, lambda: record)
    lenient.start()
    assert lenient.end("FINISHED") is record and "logger.flaky: RuntimeError: cannot log (best_effort" in caplog.text
    failing = JobTracking({"flaky": Flaky(fail_in="log")}, info, lambda: record)
    failing.start()
    failing.end("FAILED")  # on top of the job's own failure: a warning, the job's error is the one reported
    assert "(the job had already failed)" in caplog.text


def test_a_missing_tracker_package_is_one_line(tmp_path):
    @dataclass
    class Missing(Flaky):
        name: ClassVar[str] = "missing"
        requires: ClassVar[str] = "no_such_package_for_ctxbench"

    with pytest.raises(ConfigError, match=r"^logger.missing: the no_such_package_for_ctxbench package is not "
                                          r"installed \(pip install -e '.\[tracking\]'\)$"):
        Missing().check(JobInfo(tmp_path, "run_exp"))


# --- MLflow ----------------------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_mlflow_multirun_parent_and_children(tmp_path, launcher):
    uri = sqlite_uri(tmp_path)
    extra = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    sweep_dir = tmp_path / "sweep"
    proc = run_script("run_exp.py", *SWEEP, *mlflow_args(uri), *paths(tmp_path), *extra,
                      f"hydra.sweep.dir={sweep_dir}", env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, runs = runs_of(uri)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 2
    parent = parents[0]
    assert parent.info.run_name == "sweep" and parent.info.status == "FINISHED"
    jobs = {p.name: p for p in sweep_dir.iterdir() if p.is_dir()}
    assert sorted(r.info.run_name for r in children) == sorted(jobs)
    for run in children:
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.info.status == "FINISHED"
        job = jobs[run.info.run_name]
        summary = json.loads((job / "summary.json").read_text())
        figures = summary_figures(summary)
        assert {k: run.data.metrics[k] for k in figures} == pytest.approx(figures, rel=1e-12)
        assert run.data.metrics["random/examples"] == summary["methods"]["random"]["examples"]
        manifest = json.loads((job / "manifest.json").read_text())
        assert run.data.params["dataset.name"] == manifest["config"]["dataset"]["name"]
        assert run.data.params["max_examples"] == "2"
        assert run.data.params["attribution.random.seed"] == str(manifest["config"]["attribution"]["random"]["seed"])
        assert run.data.tags["stage"] == "run_exp" and run.data.tags["mode"] == "recovery"
        assert run.data.tags["dataset_sha256"] == manifest["dataset"]["sha256"]
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"summary.json", "summary.md", "results.jsonl", "manifest.json", "recovery"} <= artifacts
        local = Path(client.download_artifacts(run.info.run_id, "summary.json", str(tmp_path / run.info.run_id)))
        assert json.loads(local.read_text()) == summary
        assert json.loads((job / "tracking.json").read_text())["mlflow"]["run_id"] == run.info.run_id


@pytest.mark.slow
def test_mlflow_resumed_job_continues_its_run(tmp_path):
    uri = sqlite_uri(tmp_path)
    job = tmp_path / "job"
    common = ["dataset=niah_single_1", *JOB, *mlflow_args(uri), *paths(tmp_path), f"hydra.run.dir={job}"]
    first = run_script("run_exp.py", *common, "max_examples=1")
    assert first.returncode == 0, first.stderr[-3000:]
    run_id = json.loads((job / "tracking.json").read_text())["mlflow"]["run_id"]
    _, runs = runs_of(uri)
    assert [r.data.metrics["random/examples"] for r in runs] == [1.0]
    again = run_script("run_exp.py", *common)  # max_examples=2: the job goes on in its folder
    assert again.returncode == 0, again.stderr[-3000:]
    client, runs = runs_of(uri)
    assert [r.info.run_id for r in runs] == [run_id]
    assert runs[0].data.metrics["random/examples"] == 2.0
    history = client.get_metric_history(run_id, "random/examples")
    assert sorted(m.value for m in history) == [1.0, 2.0]
    assert runs[0].data.params["max_examples"] == "1"  # MLflow keeps a parameter's first value (warned)
    assert "keeps its first values of max_examples" in again.stdout  # the log goes to stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_wrong_tracking_uri_fails_in_one_line_before_the_model_loads(tmp_path):
    job = tmp_path / "job"
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    proc = run_script("run_exp.py", "dataset=niah_single_1", *JOB, *mlflow_args(url), *paths(tmp_path),
                      f"hydra.run.dir={job}", "logger.mlflow.timeout_s=2")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith(f"error: logger.mlflow: tracking server {url} does not answer"), proc.stderr
    assert "Traceback" not in proc.stderr and "Loading weights" not in proc.stderr + proc.stdout
    assert not job.exists()  # nothing written
    bad = run_script("run_exp.py", "dataset=niah_single_1", *JOB, *mlflow_args("nosuchscheme://x"), *paths(tmp_path),
                     f"hydra.run.dir={job}")
    assert bad.returncode == 2 and "error: logger.mlflow: tracking_uri='nosuchscheme://x' cannot be used" in bad.stderr
    # best effort: the job runs without the tracker, with a warning
    ok = run_script("run_exp.py", "dataset=niah_single_1", *JOB, *mlflow_args(url), *paths(tmp_path),
                    f"hydra.run.dir={job}", "logger.mlflow.timeout_s=2", "logger.mlflow.best_effort=true")
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "best_effort: the job goes on without it" in ok.stdout and (job / "summary.json").exists()


@pytest.fixture
def mlflow_server(tmp_path):
    """``mlflow server`` on 127.0.0.1 (a SQLite store in tmp_path), stopped at the end."""
    import requests

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
                             "--artifacts-destination", str(tmp_path / "server-artifacts"), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if requests.get(url + "/health", timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            time.sleep(0.5)
        else:
            raise AssertionError("mlflow server did not start in 120 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.slow
def test_mlflow_server_over_http_and_its_page(tmp_path, mlflow_server):
    from playwright.sync_api import sync_playwright

    from helpers.browser import CHROMIUM_ARGS, chromium_path

    sweep_dir = tmp_path / "sweep"
    proc = run_script("run_exp.py", *SWEEP, *mlflow_args(mlflow_server), *paths(tmp_path),
                      f"hydra.sweep.dir={sweep_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, runs = runs_of(mlflow_server)
    names = sorted(r.info.run_name for r in runs)
    assert len(names) == 3 and "sweep" in names
    child = next(r for r in runs if r.info.run_name != "sweep")
    assert "summary.json" in {a.path for a in client.list_artifacts(child.info.run_id)}  # uploaded over HTTP
    experiment_id = runs[0].info.experiment_id
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page()
            tab.goto(f"{mlflow_server}/#/experiments/{experiment_id}/runs")
            # the runs table shows the sweep's parent run; its expander (a button in the run-name cell) shows the
            # child runs, named as the jobs' folders
            parent = tab.get_by_role("link", name="sweep", exact=True)
            parent.wait_for(timeout=90_000)
            tab.locator("div[role=gridcell]").filter(has=parent).locator(
                "button[data-component-id*='runnamecellrenderer']").click()
            for name in names:
                tab.get_by_role("link", name=name, exact=True).wait_for(timeout=30_000)
            text = tab.inner_text("body")
        finally:
            browser.close()
    for name in names:
        assert name in text


# --- TensorBoard, wandb, CSV -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_tensorboard_wandb_and_csv_files(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    job = tmp_path / "job"
    # 2 deletion steps: the loggers' step series are the curves resampled on 21 fractions whatever the steps
    proc = run_script("run_exp.py", "dataset=niah_single_1", *JOB, "mode=[recovery,faithfulness]",
                      "mode.faithfulness.steps=2", "logger=[tensorboard,wandb,csv]", *paths(tmp_path),
                      f"hydra.run.dir={job}",
                      env={"WANDB_SILENT": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = summary_figures(json.loads((job / "summary.json").read_text()))
    acc = EventAccumulator(str(job / "tensorboard"))
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    for key, value in figures.items():
        assert scalars[key] == [(0, pytest.approx(value, rel=1e-6))]  # float32 in the event file
    curve = scalars["random/faithfulness/row/deletion_curve"]
    assert [s for s, _ in curve] == list(range(21)) and curve[0][1] == pytest.approx(1.0)  # normalised: starts at 1
    # wandb offline: a run folder with its data file and its id kept in the job folder
    run_id = json.loads((job / "tracking.json").read_text())["wandb"]["run_id"]
    offline = list((job / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(offline) == 1 and list(offline[0].glob(f"run-{run_id}.wandb"))
    # CSV: every metric with its steps
    rows = list(csv.DictReader(io.StringIO((job / "metrics.csv").read_text())))
    flat = {r["name"]: float(r["value"]) for r in rows if r["step"] == "0"}
    assert {k: flat[k] for k in figures} == pytest.approx(figures, rel=1e-12)
    assert sum(r["name"] == "random/faithfulness/row/deletion_curve" for r in rows) == 21


# --- Optuna ----------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_optuna_tpe_study_on_retrieval(tmp_path):
    sweep_dir = tmp_path / "study"
    proc = run_script("run_exp.py", "-m", *RETRIEVAL, *paths(tmp_path), "objective=retrieval.ndcg_at_10",
                      "hydra/sweeper=optuna", "hydra.sweeper.n_trials=6", "hydra.sweeper.sampler.seed=1",
                      "retriever.k1=choice(0,0.9,1.5,2.5)", "retriever.b=interval(0.2,1.0)", "logger=csv",
                      f"hydra.sweep.dir={sweep_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    best = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    # a trial with k1=0 is refused (k1 > 0) before its job writes anything: it leaves no folder, the study goes on
    values = [json.loads((job / "retrieval.json").read_text())["results"][0]["metrics"]["ndcg_at_10"]
              for job in sorted(p for p in sweep_dir.iterdir() if p.is_dir())]
    failed = proc.stdout.count("Failed experiment: retriever: k1=0.0: must be > 0")
    assert failed >= 1 and len(values) + failed == 6
    assert proc.stderr.count("error: retriever: k1=0.0: must be > 0") == failed
    assert best["best_value"] == max(values)
    assert best["best_params"]["retriever.k1"] != 0
    assert "Directions: ['maximize']" in proc.stdout


@pytest.mark.slow
def test_optuna_example_config_composes_with_the_direction(tmp_path):
    """The shipped example studies: the sweeper, its direction from the objective and its search space."""
    from hydra import compose, initialize_config_dir

    from ctxbench.stages.conf import CONF_DIR, register_configs

    register_configs()
    for name, objective, direction in (("optuna_bm25", "retrieval.ndcg_at_10", "maximize"),
                                       ("optuna_dense", "retrieval.ndcg_at_10", "maximize")):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("run", overrides=[f"+experiment={name}"], return_hydra_config=True)
        assert cfg.objective == objective
        assert cfg.hydra.sweeper._target_.endswith("OptunaSweeper")
        assert cfg.hydra.sweeper.direction == direction
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("sample", overrides=["+experiment=optuna_sampling"], return_hydra_config=True)
    assert cfg.objective == "funnel.kept" and cfg.hydra.sweeper.direction == "maximize"
    assert set(cfg.hydra.sweeper.params) == {"retriever", "retriever.ice_num"}
