"""Command-line overrides checked before Hydra runs a stage, so that a config mistake is one line and exit code 2
(as every other user error) instead of Hydra's multi-line message and exit code 1.

The check composes the stage's config with the command's overrides (Hydra's own compose API; ``hydra.*`` overrides
are left to Hydra, and each sweep of ``-m`` contributes its first value) and turns what fails into one line:

- a misspelt key: ``unknown key `hopz` in attribution.ifr_multi_hop; did you mean `hops`?`` (the key names come from
  the composed config, i.e. the schema of the part);
- a parameter of a method or mode that is not selected: ``attribution.attention is not selected
  (attribution=[ifr_multi_hop,random]); add it to the list, attribution=[ifr_multi_hop,random,attention], to set its
  parameters``;
- an unknown option of a config group, with the options there are;
- a list written without brackets outside ``-m`` (``attribution=a,b``): write ``attribution=[a,b]``;
- a value of the wrong type, and anything else Hydra refuses: its first line.

``HYDRA_FULL_ERROR=1`` skips the check: Hydra then reports in full, with its traceback.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Optional

# Hydra's own flags that print something instead of running (nothing to check)
_INFO_FLAGS = {"--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc"}
_MULTIRUN_FLAGS = {"-m", "--multirun"}


def check_overrides(conf_dir: str | Path, config_name: str, args: list[str]) -> Optional[str]:
    """The one-line message of the first config mistake in ``args`` (a command line's arguments), or None."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1" or _INFO_FLAGS & set(args):
        return None
    multirun = bool(_MULTIRUN_FLAGS & set(args))
    texts = split_args(args)[1]
    if not texts:
        return None
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(texts)
    except OverrideParseException as exc:
        return f"cannot read the override: {_first_line(exc)}"
    overrides, dirs = [], [Path(conf_dir)]
    for text, o in zip(texts, parsed):
        # config folders beside conf/: their options count, compose reads them
        if override_key(text) == "hydra.searchpath":
            dirs += [Path(v[len("file://"):]) for v in o.value() or [] if str(v).startswith("file://")]
            overrides.append(text)
            continue
        if o.get_key_element().lstrip("+~").startswith("hydra"):
            continue  # Hydra's own settings (run dirs, launchers, ...): Hydra checks them
        if o.is_sweep_override():
            if not multirun:
                key = o.get_key_element()
                return (f"`{text}` is a sweep, which needs -m; for a list of options write "
                        f"{key}=[{','.join(o.sweep_string_iterator())}]")
            values = list(o.sweep_string_iterator()) if o.is_discrete_sweep() else []
            if not values:
                continue  # a range or glob sweep: Hydra expands and checks it
            options = _options(dirs, override_key(text))
            for v in values[1:] if options else ():  # every option of a group sweep exists
                if v not in options:
                    return _missing_option(dirs, None, f"{override_key(text)}/{v}")
            text = f"{o.get_key_element()}={values[0]}"
        overrides.append(text)
    return _compose_error(dirs, config_name, overrides)


def _options(dirs: list[Path], group: str) -> list[str]:
    """The options of a config group: its YAML files in conf/ and in the folders of hydra.searchpath."""
    return sorted({p.stem for d in dirs if (d / group).is_dir() for p in (d / group).glob("*.yaml")})


def split_args(args: list[str]) -> tuple[list[str], list[str]]:
    """``(flags, overrides)`` of a command line: a flag keeps the value of a flag that takes one (``--config-name
    x``); every other argument is an override."""
    flags, out, skip = [], [], False
    for a in args:
        if skip:
            skip = False
            flags.append(a)
        elif a.startswith("-"):
            skip = a in ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--cfg", "-c",
                         "--package", "-p", "--experimental-rerun")
            flags.append(a)
        else:
            out.append(a)
    return flags, out


def _compose(conf_dir: Path, config_name: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides)


def _compose_error(dirs: list[Path], config_name: str, overrides: list[str]) -> Optional[str]:
    from hydra.errors import MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    try:
        _compose(dirs[0], config_name, overrides)
        return None
    except MissingConfigException as exc:
        return _missing_option(dirs, exc)
    except Exception as exc:  # Hydra wraps OmegaConf's error (the cause names the key)
        cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else exc
        full_key = getattr(cause, "full_key", None)
        if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and full_key:
            rest = [o for o in overrides
                    if override_key(o) != full_key and not override_key(o).startswith(full_key + ".")]
            return _unknown_key(dirs, config_name, rest, full_key)
        return f"{full_key}: {_first_line(cause)}" if full_key else _first_line(cause)


def override_key(override: str) -> str:
    """The key an override sets: without its ``+``/``~`` prefix, value and ``@package``."""
    return override.split("=", 1)[0].lstrip("+~").split("@", 1)[0]


def _unknown_key(dirs: list[Path], config_name: str, overrides: list[str], full_key: str) -> str:
    """The line for a key the composed config does not have."""
    from omegaconf import DictConfig, OmegaConf

    parent, _, key = full_key.rpartition(".")
    try:
        cfg = _compose(dirs[0], config_name, overrides)
    except Exception:  # another mistake among the rest: say what is known
        return f"unknown key `{key}`" + (f" in {parent}" if parent else "")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if parent and "." not in parent and key in _options(dirs, parent):
        # a method / mode option that exists but is not in the selected list: its parameters are not there to set
        chosen = list(node.keys()) if isinstance(node, DictConfig) else []
        return (f"{parent}.{key} is not selected ({parent}=[{','.join(chosen)}]); add it to the list, "
                f"{parent}=[{','.join(chosen + [key])}], to set its parameters")
    known = [str(k) for k in node.keys()] if isinstance(node, DictConfig) else []
    where = f" in {parent}" if parent else ""
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean `{close[0]}`?" if close else (f"; known keys: {', '.join(known)}" if known else "")
    return f"unknown key `{key}`{where}{hint}"


def _missing_option(dirs: list[Path], exc, missing: str = "") -> str:
    """An option of a config group that does not exist (``missing``: ``group/name``): the options there are."""
    missing = missing or getattr(exc, "missing_cfg_file", None) or ""
    group, _, name = str(missing).rpartition("/")
    options = getattr(exc, "options", None) or _options(dirs, group)
    if group:
        return f"unknown {group} option `{name}`" + (f"; options: {', '.join(options)}" if options else "")
    return _first_line(exc)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0].strip()


def app_help(conf_dir: str | Path, config_name: str, app_name: str, args: list[str]) -> str:
    """``--help``: Hydra's page (the config groups and their options, then the composed config with the command's
    overrides), without the internal ``schema/*`` groups and in about a second: Hydra's own page composes the config
    store once per group option (tens of seconds with the part schemas registered)."""
    from omegaconf import OmegaConf

    conf_dir = Path(conf_dir)
    groups = [f"{d.name}: {', '.join(_options([conf_dir], d.name))}"
              for d in sorted(conf_dir.iterdir()) if d.is_dir() and d.name != "hydra" and any(d.glob("*.yaml"))]
    overrides = [o for o in split_args(args)[1] if not o.lstrip("+~").startswith("hydra")]
    cfg = _compose(conf_dir, config_name, overrides)
    return (f"{app_name} is powered by Hydra.\n\n== Configuration groups ==\nCompose your configuration from those "
            f"groups (group=option)\n\n" + "\n".join(groups) + "\n\n\n== Config ==\nOverride anything in the config "
            f"(foo.bar=value)\n\n{OmegaConf.to_yaml(cfg)}\n\nPowered by Hydra (https://hydra.cc)\n"
            f"Use --hydra-help to view Hydra specific help\n")

