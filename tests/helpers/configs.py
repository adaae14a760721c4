"""Stage configs composed as the command line composes them (Hydra's compose API over the project's conf/), with
every folder a stage writes in a temporary one."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from helpers.paths import CACHE_DIR, CONF


@functools.cache
def _registered() -> None:
    from ctxbench.stages.conf import register_configs

    register_configs()  # the stage schemas and every part's schema (schema/<group>/<option>)


def compose_stage(config_name: str, *overrides: str, hydra: bool = False, conf_dir: Path = CONF):
    """``conf/<config_name>.yaml`` with ``overrides``; ``hydra``: with the ``hydra`` node (run and sweep dirs)."""
    from hydra import compose, initialize_config_dir

    _registered()
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides), return_hydra_config=hydra)


def tmp_paths(tmp_path: Path, samples: str = "samples") -> list[str]:
    """The ``paths`` overrides that keep a stage inside ``tmp_path`` (data, sampled caches; the model cache is the
    test session's)."""
    return [f"paths.root={tmp_path}", f"paths.data_dir={tmp_path / 'data'}", f"paths.model_cache_dir={CACHE_DIR}",
            f"paths.samples_dir={tmp_path / samples}"]


def run_cfg(tmp_path: Path, *overrides: str):
    """run_exp on up to 4 examples of niah_mq_q2 at 512 tokens (generated into ``tmp_path``), no progress bar."""
    return compose_stage("run", *tmp_paths(tmp_path, samples="cache"), "dataset=niah_mq_q2", "length=512",
                         "max_examples=4", "progress=false", *overrides)


@functools.cache
def morehopqa_rows() -> list[dict]:
    """The packaged 150-row MoreHopQA sample (read once; not to be changed)."""
    from ctxbench.datasets import morehopqa_sample

    return json.loads(morehopqa_sample().read_text())


def replay_file(tmp_path: Path, n: int) -> Path:
    """Responses for the first n MoreHopQA rows: every third malformed, every third judged wrong, the rest correct."""
    lines = []
    for i, row in enumerate(morehopqa_rows()[:n]):
        if i % 3 == 1:
            response = f"The answer should be {row['answer']}, I think."  # no box
        elif i % 3 == 2:
            response = "Reading the context carefully. \\box{The answer is certainly nothing at all.}"
        else:
            response = f"The question asks for one value; the context gives it. \\box{{The answer is {row['answer']}.}}"
        lines.append(json.dumps({"id": row["_id"], "response": response}))
    path = tmp_path / "responses.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def sample_cfg(tmp_path: Path, *overrides: str, n: int = 9):
    """sample_and_filter on MoreHopQA with replayed responses for its first ``n`` rows (``replay_file``), BM25 worked
    examples, chunks of 4 rows."""
    return compose_stage("sample", f"paths.root={tmp_path}", f"paths.model_cache_dir={CACHE_DIR}",
                         f"paths.samples_dir={tmp_path / 'samples'}", "generator=replay",
                         f"generator.path={replay_file(tmp_path, n)}", "progress=false", "chunk=4", "retriever=bm25",
                         *overrides)


def plugin_option(tmp_path: Path, group: str, option: str, text: str) -> str:
    """A config option from outside the project: ``<tmp_path>/conf/<group>/<option>.yaml`` holding ``text``. Returns
    the override that adds that folder to Hydra's search path (the same for every option written there)."""
    folder = tmp_path / "conf" / group
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{option}.yaml").write_text(text)
    return f"hydra.searchpath=[file://{tmp_path / 'conf'}]"


def plugin_module(tmp_path: Path, name: str, source: str) -> Path:
    """A module ``name`` (its ``source``) in ``<tmp_path>/plug``, the folder a child process is given on its
    ``PYTHONPATH`` (``helpers.cli``: ``pythonpath=``) so that a plug-in option's ``_target_`` imports."""
    folder = tmp_path / "plug"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(source)
    return folder
