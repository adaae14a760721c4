"""``resume=latest | <dir>``: a resumed run goes on with the settings it was started with.

Hydra composes a run from the command line alone, so a bare ``run_exp.py resume=latest`` would compose the defaults
and rewrite the folder's record (``.hydra/overrides.yaml``, ``manifest.json``) to settings its results were not made
with. Before Hydra runs, ``resumed_args`` therefore puts the folder's own record in front of the command line:

- the record is ``<dir>/.hydra/overrides.yaml`` for a single run and ``<dir>/multirun.yaml``'s ``hydra.overrides``
  for a sweep (whose jobs' folders are found again through the recorded ``hydra.sweep.subdir``); a sweep folder
  resumes as a sweep (``-m``) whatever the command says;
- an override on the command line that the record gives another value, or that the record lacks, is refused in one
  line naming it, unless its key never changes a result (``NEUTRAL_KEYS``: where files live, progress, reports,
  statistics, trackers, and ``max_examples``, which adds examples without changing the ones scored);
- ``resume=latest`` becomes ``resume=<the folder>``, so that a recorded ``dataset=`` cannot move the search for it.

A folder without a record (made by hand, or by a version that did not keep one) resumes with the command line as
given, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

from ctxbench.core.errors import ConfigError
from ctxbench.jobs.manifest import NEUTRAL_PREFIXES
from ctxbench.stages.preflight import override_key, split_args

# keys a resumed run may set to other values than its record: none of them changes a result line
NEUTRAL_KEYS = NEUTRAL_PREFIXES + ("max_examples", "logger", "objective", "hydra.")
_MULTIRUN_FLAGS = ("-m", "--multirun")
# Hydra settings the resumed run takes from the command line, not the record: how it runs and where (resume= names
# the folder, so the recorded folder would only repeat it)
_HYDRA_OWN = ("hydra.mode", "hydra.run.dir", "hydra.sweep.dir")


def _value(text: str) -> str:
    return text.partition("=")[2]


def _is_neutral(key: str) -> bool:
    return key.startswith(NEUTRAL_KEYS) or key in ("paths", "stats")


def recorded_overrides(folder: Path) -> Optional[tuple[list[str], list[str], bool]]:
    """``(task overrides, hydra overrides, is a sweep)`` the run in ``folder`` was started with, or None when the
    folder keeps no record."""
    sweep = folder / "multirun.yaml"
    if sweep.is_file():
        overrides = (yaml.safe_load(sweep.read_text(encoding="utf-8")) or {}).get("hydra", {}).get("overrides", {})
        return list(overrides.get("task") or []), list(overrides.get("hydra") or []), True
    single = folder / ".hydra" / "overrides.yaml"
    if not single.is_file():
        return None
    task = yaml.safe_load(single.read_text(encoding="utf-8")) or []
    hydra_file = folder / ".hydra" / "hydra.yaml"
    hydra_ovs = []
    if hydra_file.is_file():
        hydra_ovs = ((yaml.safe_load(hydra_file.read_text(encoding="utf-8")) or {}).get("hydra", {})
                     .get("overrides", {}).get("hydra") or [])
    return list(task), list(hydra_ovs), False


def merge_with_record(folder: Path, args: list[str], record: tuple[list[str], list[str], bool]) -> list[str]:
    """The command line that resumes ``folder``: its record, then what ``args`` add that changes no result, then
    ``resume=<folder>``; an override that would change a result is refused (``ConfigError``)."""
    task, hydra_ovs, sweep = record
    task = [t for t in task if override_key(t) != "resume"]
    recorded = {override_key(t): _value(t) for t in task}
    flags, given = split_args(args)
    given = [a for a in given if override_key(a) != "resume"]
    changed = []
    for text in given:
        key = override_key(text)
        if _is_neutral(key) or recorded.get(key) == _value(text):
            continue
        was = f"{key}={recorded[key]}" if key in recorded else f"no {key} override"
        changed.append(f"{text} (the run has {was})")
    if changed:
        raise ConfigError(f"resume={folder}: {'; '.join(changed)}: its results were made with the recorded settings "
                          f"({folder / ('multirun.yaml' if sweep else '.hydra/overrides.yaml')}); start a new run "
                          f"for other settings")
    given_keys = {override_key(a) for a in given}
    out = [t for t in task if override_key(t) not in given_keys]
    out += [h for h in hydra_ovs if override_key(h) not in _HYDRA_OWN and override_key(h) not in given_keys]
    out += given + [f"resume={folder}"]
    if sweep and not any(f in flags for f in _MULTIRUN_FLAGS):
        flags = [*flags, "-m"]
    return flags + out


def resume_folder(conf_dir: Path, config_name: str, args: list[str]) -> Optional[Path]:
    """The folder ``resume=`` names in ``args`` (``latest`` resolved as the run would), or None without one."""
    texts = split_args(args)[1]
    value = next((_value(a) for a in texts if override_key(a) == "resume"), None)
    if value in (None, "", "null", "None"):
        return None
    if value != "latest":
        return Path(value)
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from hydra.core.override_parser.overrides_parser import OverridesParser

    multirun = any(a in _MULTIRUN_FLAGS for a in args)
    # the folder depends on the stage, and for a single run on its dataset: a sweep's values are not needed
    plain = [t for t, o in zip(texts, OverridesParser.create().parse_overrides(texts)) if not o.is_sweep_override()]
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=plain, return_hydra_config=True)
        return Path(OmegaConf.select(cfg, "hydra.sweep.dir" if multirun else "hydra.run.dir"))


def resumed_args(conf_dir: str | Path, config_name: str, args: list[str]) -> list[str]:
    """``args`` of a command with ``resume=``, completed with the resumed run's recorded settings (module doc);
    ``args`` unchanged without ``resume=`` or without a record."""
    folder = resume_folder(Path(conf_dir), config_name, args)
    if folder is None or not folder.is_dir():
        return args  # no resume, or a folder that is not there: the run's own check says so
    record = recorded_overrides(folder)
    if record is None:
        return args
    return merge_with_record(folder, args, record)
