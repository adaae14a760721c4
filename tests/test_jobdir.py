"""Job folders (ctxbench.stages.jobdir): a refused rerun changes nothing of the folder, resume= picks the folder,
Ctrl-C ends with one line and the command that resumes, folder names pass back to Hydra as they are."""

import json
import re
import signal
import subprocess
import time

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from helpers.cli import run_script, start_script
from helpers.configs import compose_stage, plugin_module, plugin_option
from helpers.paths import CACHE_DIR
from helpers.records import folder_bytes, write_ruler_task


def test_a_refused_rerun_leaves_the_folders_bytes_unchanged(tmp_path):
    """run_exp: results written under another configuration are refused before the folder changes (manifest.json,
    .hydra/*.yaml, the job's log: every byte as it was); a folder made for a run refused from the start is removed."""
    data = tmp_path / "data"
    write_ruler_task(data, "niah_mq_q2")
    common = [f"paths.data_dir={data}", f"paths.model_cache_dir={CACHE_DIR}", f"paths.samples_dir={tmp_path / 's'}",
              "attribution=[random]", "mode=[recovery]", "views=[seq]"]
    job = tmp_path / "job"
    out = run_script("run_exp.py", *common, "dry_run=true", f"hydra.run.dir={job}")  # the earlier run's record
    assert out.returncode == 0, out.stderr[-2000:]
    assert {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "manifest.json",
            "run_exp.log"} <= set(folder_bytes(job))
    (job / "results.jsonl").write_text(json.dumps({"example_id": "niah_mq_q2/0", "method": "random",
                                                   "config": "0123456789abcdef"}) + "\n")
    before = folder_bytes(job)
    out = run_script("run_exp.py", *common, "seed=1", f"hydra.run.dir={job}")
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {job / 'results.jsonl'}:1: field 'config': written for method 'random' under "
                           f"another configuration"), last
    assert folder_bytes(job) == before
    fresh = tmp_path / "fresh"
    out = run_script("run_exp.py", "dataset=jsonl", f"dataset.path={tmp_path / 'missing.jsonl'}", *common[1:],
               f"hydra.run.dir={fresh}")
    assert out.returncode == 2 and "no such RULER-format JSONL file" in out.stderr
    assert not fresh.exists()


def test_a_refused_sampling_rerun_leaves_the_folders_bytes_unchanged(tmp_path, morehopqa_path):
    """sample_and_filter: a cache made with other settings is refused before the job folder changes."""
    answers = tmp_path / "answers.jsonl"
    answers.write_text(json.dumps({"id": "x", "response": "I think. \\box{yes}"}) + "\n")
    samples = tmp_path / "samples"
    common = ["dataset=morehopqa", f"dataset.path={morehopqa_path}", "generator=replay", f"generator.path={answers}",
              f"paths.model_cache_dir={CACHE_DIR}", f"paths.samples_dir={samples}", "max_rows=2"]
    job = tmp_path / "job"
    out = run_script("sample_and_filter.py", *common, "dry_run=true", f"hydra.run.dir={job}")
    assert out.returncode == 0, out.stderr[-2000:]
    samples.mkdir()
    (samples / "morehopqa.jsonl.config.json").write_text(json.dumps({"made": "elsewhere"}) + "\n")
    before = folder_bytes(job)
    assert "manifest.json" in before and "sample_and_filter.log" in before
    out = run_script("sample_and_filter.py", *common, f"hydra.run.dir={job}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "made with other settings" in out.stderr.strip().splitlines()[-1]
    assert folder_bytes(job) == before


def _compose(*overrides, config_name="run"):
    return compose_stage(config_name, *overrides, hydra=True)


def test_resume_picks_the_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "outputs" / "run_exp" / "niah_mq_q2"
    for name in ("2026-01-01_10-00-00", "2026-01-02_09-00-00"):
        (runs / name).mkdir(parents=True)
    (tmp_path / "outputs" / "run_exp" / "vt_h2_c3" / "2026-03-01_00-00-00").mkdir(parents=True)
    assert _compose("resume=latest").hydra.run.dir == "outputs/run_exp/niah_mq_q2/2026-01-02_09-00-00"
    assert _compose("resume=latest", "dataset=vt_h2_c3").hydra.run.dir.endswith("vt_h2_c3/2026-03-01_00-00-00")
    fresh = _compose().hydra.run.dir
    assert fresh.startswith("outputs/run_exp/niah_mq_q2/") and fresh not in {str(p) for p in runs.iterdir()}
    sweeps = tmp_path / "outputs" / "multirun" / "sample_and_filter"
    (sweeps / "2026-01-01_10-00-00").mkdir(parents=True)
    assert _compose("resume=latest", config_name="sample").hydra.sweep.dir == str(sweeps.relative_to(tmp_path) /
                                                                                  "2026-01-01_10-00-00")
    # a folder named by scripts/table1.sh (= and ,) is given in Hydra's quotes
    odd = tmp_path / "faith_rec" / "dataset=niah_mq_q2,max_examples=20"
    odd.mkdir(parents=True)
    assert _compose(f"resume='{odd}'").hydra.run.dir == str(odd)
    assert _compose(f"resume={runs / '2026-01-01_10-00-00'}").hydra.run.dir == str(runs / "2026-01-01_10-00-00")


def test_a_bad_resume_is_one_line_and_exit_2(tmp_path):
    out = run_script("run_exp.py", "resume=latest", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: resume=latest: no earlier run in outputs/run_exp/niah_mq_q2/ to resume (resume=<folder> names one)"]
    out = run_script("run_exp.py", "-m", f"resume={tmp_path / 'nothing'}", "dataset=niah_mq_q2,vt_h2_c3", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"error: resume={tmp_path / 'nothing'}: no such run folder"]
    assert not (tmp_path / "outputs").exists()


def _record(folder, task, hydra=(), sweep=False):
    if sweep:
        (folder / "multirun.yaml").parent.mkdir(parents=True, exist_ok=True)
        (folder / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"task": list(task),
                                                                                      "hydra": list(hydra)}}}))
    else:
        (folder / ".hydra").mkdir(parents=True)
        (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(list(task)))
        (folder / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"hydra": list(hydra)}}}))


def test_a_resume_takes_the_recorded_settings_and_refuses_others(tmp_path):
    """resume=<dir>: the folder's recorded overrides come first; keys that change no result may be given anew; any
    other override that differs from the record, or that it lacks, is refused in one line naming it."""
    from ctxbench.core.errors import ConfigError
    from ctxbench.stages.resume import merge_with_record, recorded_overrides

    single = tmp_path / "single"
    _record(single, ["attribution=[position,random]", "max_examples=1", "resume=old"], ["hydra.run.dir=x"])
    rec = recorded_overrides(single)
    assert rec == (["attribution=[position,random]", "max_examples=1", "resume=old"], ["hydra.run.dir=x"], False)
    assert merge_with_record(single, [f"resume={single}"], rec) == [
        "attribution=[position,random]", "max_examples=1", f"resume={single}"]
    # the same settings again (a printed resume command), more examples, and neutral keys: accepted
    assert merge_with_record(single, ["attribution=[position,random]", "max_examples=3", "progress=false",
                                      "paths.root=.", "stats.min_n=1", "resume=latest"], rec) == [
        "attribution=[position,random]", "max_examples=3", "progress=false", "paths.root=.", "stats.min_n=1",
        f"resume={single}"]
    with pytest.raises(ConfigError) as err:
        merge_with_record(single, ["attribution=[random]", "seed=2", "html=false"], rec)
    assert str(err.value) == (
        f"resume={single}: attribution=[random] (the run has attribution=[position,random]); seed=2 (the run has no "
        f"seed override): its results were made with the recorded settings ({single / '.hydra/overrides.yaml'}); "
        f"start a new run for other settings")
    # a sweep resumes as a sweep, with its recorded subdir; its mode and folder come from the command
    sweep = tmp_path / "sweep"
    _record(sweep, ["dataset=a,b", "mode=recovery"],
            ['hydra.sweep.subdir="d=${hydra:runtime.choices.dataset}"', "hydra.sweep.dir=sweep", "hydra.mode=MULTIRUN"],
            sweep=True)
    rec = recorded_overrides(sweep)
    assert rec[2] is True
    assert merge_with_record(sweep, [f"resume={sweep}"], rec) == [
        "-m", "dataset=a,b", "mode=recovery", 'hydra.sweep.subdir="d=${hydra:runtime.choices.dataset}"',
        f"resume={sweep}"]
    assert recorded_overrides(tmp_path) is None  # no record: the command line as given


def test_a_bare_resume_latest_goes_on_with_the_runs_methods_and_keeps_its_record(tmp_path):
    """The new user's case: a run with non-default methods, then a bare `resume=latest`, went on with the defaults and
    rewrote the folder's record. Now it scores the run's own methods, and the record still names them."""
    args = [f"paths.model_cache_dir={CACHE_DIR}", "attribution=[position,random]", "mode=[recovery]", "views=[seq]",
            "length=512", "dataset.num_samples=2", "max_examples=1", "heatmaps=0", "html=false", "progress=false"]
    out = run_script("run_exp.py", *args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    (job,) = (tmp_path / "outputs" / "run_exp" / "niah_mq_q2").iterdir()
    out = run_script("run_exp.py", "resume=latest", "max_examples=2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line) for line in (job / "results.jsonl").read_text().splitlines()]
    assert sorted((r["example_id"], r["method"]) for r in rows) == [
        (f"niah_mq_q2/{i}", m) for i in range(2) for m in ("position", "random")]
    overrides = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
    assert "attribution=[position,random]" in overrides and "max_examples=2" in overrides
    assert list(json.loads((job / "manifest.json").read_text())["config"]["attribution"]) == ["position", "random"]
    before = folder_bytes(job)
    out = run_script("run_exp.py", "resume=latest", "attribution=[ifr_multi_hop,random]", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"error: resume=outputs/run_exp/niah_mq_q2/{job.name}: attribution=[ifr_multi_hop,random] (the run has "
        f"attribution=[position,random]): its results were made with the recorded settings "
        f"(outputs/run_exp/niah_mq_q2/{job.name}/.hydra/overrides.yaml); start a new run for other settings"]
    assert folder_bytes(job) == before


def test_sweep_job_folder_names_pass_back_to_hydra_as_they_are(tmp_path):
    cfg = _compose("dataset=vt_h2_c3", "mode=faithfulness", "attribution.random.seed=3", "resume=latest",
                   f"paths.data_dir={tmp_path}")
    name = f"0_{cfg.hydra.job.override_dirname}"
    assert name == "0_attribution.random.seed-3+dataset-vt_h2_c3+mode-faithfulness"  # resume, paths: not the job's
    parser = OverridesParser.create()
    folder = f"outputs/multirun/run_exp/2026-01-01_10-00-00/{name}"
    assert parser.parse_overrides([f"resume={folder}"])[0].value() == folder
    assert parser.parse_overrides([f"hydra.run.dir={folder}"])[0].value() == folder
    assert parser.parse_overrides([f"runs=[{folder},{folder}]"])[0].value() == [folder, folder]


def test_a_merge_is_filed_under_the_merged_shards_dataset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shard = tmp_path / "shards" / "0"
    shard.mkdir(parents=True)
    (shard / "manifest.json").write_text(json.dumps({"stage": "run_exp", "dataset": {"name": "vt_h2_c3"},
                                                     "config": {"shard": {"index": 0, "count": 2}}}))
    assert _compose(f"merge=[{tmp_path / 'shards'}]").hydra.run.dir.startswith("outputs/run_exp/vt_h2_c3/")
    (tmp_path / "shards" / "1").mkdir()
    (tmp_path / "shards" / "1" / "manifest.json").write_text(json.dumps({"dataset": {"name": "niah_mv_v2"}}))
    assert _compose(f"merge=[{tmp_path / 'shards'}]").hydra.run.dir.startswith("outputs/run_exp/merged/")


SLOW_ATTRIBUTOR = '''
import time
from dataclasses import dataclass
from ctxbench.attribution.baselines import RandomAttributor

@dataclass
class SlowRandom(RandomAttributor):
    """The random baseline, slowed down so that a test can interrupt the run between two lines."""
    delay: float = 1.0

    def _attribute(self, *args, **kwargs):
        time.sleep(self.delay)
        return super()._attribute(*args, **kwargs)
'''


@pytest.mark.slow
@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_a_signal_then_resume_latest_finishes_with_each_example_and_method_once(tmp_path, sig, code, word):
    plug = plugin_module(tmp_path, "slow_random", SLOW_ATTRIBUTOR)
    search_path = plugin_option(tmp_path, "attribution", "slow",
                                "slow:\n  _target_: slow_random.SlowRandom\n  delay: 1.0\n")
    args = [f"paths.data_dir={tmp_path / 'data'}", f"paths.model_cache_dir={CACHE_DIR}",
            f"paths.samples_dir={tmp_path / 'samples'}", search_path, "attribution=[random,slow]", "mode=[recovery]",
            "views=[seq]", "length=512", "dataset.num_samples=4", "max_examples=4", "heatmaps=0", "html=false",
            "progress=false"]
    runs = tmp_path / "outputs" / "run_exp" / "niah_mq_q2"  # cwd=tmp_path: the run dir is relative to it
    proc = start_script("run_exp.py", *args, cwd=tmp_path, pythonpath=plug, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        results = list(runs.glob("*/results.jsonl"))
        if results and results[0].read_text().count("\n") >= 1:
            break
        time.sleep(0.1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    (job,) = runs.iterdir()
    kept = (job / "results.jsonl").read_text().splitlines()
    assert 1 <= len(kept) < 8
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith(f"{word}: ") and " of 4 examples × 2 methods kept" in last
    assert f"in outputs/run_exp/niah_mq_q2/{job.name}/results.jsonl; resume: " in last
    assert last.endswith(f"progress=false resume=outputs/run_exp/niah_mq_q2/{job.name}")
    out = run_script("run_exp.py", *args, "resume=latest", cwd=tmp_path, pythonpath=plug)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [p.name for p in runs.iterdir()] == [job.name]
    lines = (job / "results.jsonl").read_text().splitlines()
    assert lines[:len(kept)] == kept  # nothing written before is lost or rewritten
    pairs = [(json.loads(line)["example_id"], json.loads(line)["method"]) for line in lines]
    assert sorted(pairs) == sorted({(f"niah_mq_q2/{i}", m) for i in range(4) for m in ("random", "slow")})
    assert (job / "summary.json").exists()


def test_progress_names_the_method_and_step_and_the_run_says_where_it_writes(tmp_path):
    """Output that is not a terminal gets the progress as log lines (every CTXBENCH_PROGRESS_EVERY_S seconds; 0 here:
    every step): they count (example, method) steps and name the step under way; each example's real time is logged;
    the job folder (and, for -m, the sweep folder) is said first and the files written last."""
    common = [f"paths.model_cache_dir={CACHE_DIR}", "attribution=[random,attention]", "mode=[recovery]",
              "views=[seq]", "length=512", "dataset.num_samples=2", "max_examples=2", "heatmaps=0", "html=false"]
    out = run_script("run_exp.py", *common, "progress=true", cwd=tmp_path, env={"CTXBENCH_PROGRESS_EVERY_S": "0"})
    assert out.returncode == 0, out.stderr[-3000:]
    logged = out.stdout  # the log on stdout (Hydra's)
    bar = "\n".join(line for line in logged.splitlines() if "[ctxbench.utils.progress]" in line)
    assert "\r" not in out.stderr and "run_exp niah_mq_q2" not in out.stderr  # no terminal bar in a pipe
    (job,) = (tmp_path / "outputs" / "run_exp" / "niah_mq_q2").iterdir()
    folder = f"outputs/run_exp/niah_mq_q2/{job.name}"
    assert f"- job folder: {folder}\n" in logged
    for n, method in ((1, "random"), (1, "attention"), (2, "attention")):
        assert f"run_exp niah_mq_q2 example {n}/2 {method}: recovery" in bar, bar[-3000:]
    assert re.search(r"\d+\.\d s/example\]", bar)  # the bar's real time per example
    assert re.search(r"- example niah_mq_q2/1 \(2 of 2\): 2 methods in \d+\.\d s", logged)
    assert logged.rstrip().endswith(f"- wrote in {folder}: manifest.json, recovery/ (2 files), results.jsonl, "
                                    f"summary.json, summary.md")
    md = (job / "summary.md").read_text()
    assert "| scored | attribution s/example | total s/example |" in md
    out = run_script("run_exp.py", "-m", *common, "progress=false", "seed=1,2", cwd=tmp_path,
                     env={"CTXBENCH_PROGRESS_EVERY_S": "0"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "[ctxbench.utils.progress]" not in out.stdout  # progress=false: no progress lines
    (sweep,) = (tmp_path / "outputs" / "multirun" / "run_exp").iterdir()
    assert f"(sweep folder outputs/multirun/run_exp/{sweep.name})" in out.stdout


def test_the_line_that_ends_a_stopped_run_goes_into_its_log_too(tmp_path):
    """A SIGTERM's or Ctrl-C's "terminated: ... resume: ..." line was printed but not written to run_exp.log: the job's
    log now ends with it (the file handler alone, so the terminal shows it once)."""
    import logging

    from ctxbench.stages.jobdir import DeferredFileHandler, to_job_log

    handler = DeferredFileHandler(tmp_path / "run_exp.log")
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        handler.start()  # the job was accepted: its log is open
        to_job_log("terminated: 3 of 5 examples × 2 methods kept in x; resume: python run_exp.py resume=x")
    finally:
        root.removeHandler(handler)
        handler.close()
    assert (tmp_path / "run_exp.log").read_text() == ("WARNING terminated: 3 of 5 examples × 2 methods kept in x; "
                                                      "resume: python run_exp.py resume=x\n")


def test_a_linked_interpreter_is_shown_as_the_link_inside_the_project(tmp_path, monkeypatch):
    """A venv's python is a link to an interpreter outside the project: resume lines show `.venv/bin/python`, not an
    absolute path naming this machine's folders (committed run logs carry them)."""
    from ctxbench.stages.jobdir import shown

    outside = tmp_path / "usr" / "python3"
    outside.parent.mkdir()
    outside.write_text("")
    (tmp_path / "proj" / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / "proj" / ".venv" / "bin" / "python").symlink_to(outside)
    monkeypatch.chdir(tmp_path / "proj")
    assert shown(tmp_path / "proj" / ".venv" / "bin" / "python") == ".venv/bin/python"
    assert shown(outside) == str(outside)


@pytest.mark.slow
def test_a_finished_job_and_its_report_rerun_change_no_byte(tmp_path):
    """Issue 70 item 5 (a finished lane rerun rewrote 12 committed files): a rerun that finds every example scored
    leaves every file of its folder as it was, the manifest (time, commit), the log, the summaries and the PNG plots
    included; so does a report made again from the same runs."""
    job, report = tmp_path / "job", tmp_path / "report"
    args = [f"paths.model_cache_dir={CACHE_DIR}", "attribution=[position,random]", "mode=[recovery,faithfulness]",
            "mode.faithfulness.steps=2", "views=[seq]", "length=512", "dataset.num_samples=2", "max_examples=2",
            "heatmaps=1", "html=false", "progress=false", f"hydra.run.dir={job}"]
    out = run_script("run_exp.py", *args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    report_args = [f"runs=[{job}]", "stats.min_n=1", f"hydra.run.dir={report}"]
    out = run_script("report.py", *report_args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert any(p.suffix == ".png" for p in job.rglob("*")) and any(p.suffix == ".png" for p in report.rglob("*"))
    before_job, before_report = folder_bytes(job), folder_bytes(report)
    out = run_script("run_exp.py", *args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "wrote in job: nothing" in out.stdout
    assert folder_bytes(job) == before_job
    out = run_script("report.py", *report_args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert folder_bytes(report) == before_report
