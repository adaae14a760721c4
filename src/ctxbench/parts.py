"""Pluggable parts: config nodes with a ``_target_`` class, checked against the class's typed constructor.

A part is one module (its class) and one YAML file (``conf/<group>/<option>.yaml`` naming the class). The class's
constructor (dataclass fields or typed keywords) is the only list of its parameters:

- ``register_part_schemas(conf_dir)`` reads every option file of the groups, builds a structured schema from the
  ``_target_`` class's signature (hydra-zen ``builds``) and stores it as ``schema/<group>/<option>`` in Hydra's
  ConfigStore. An option file lists that schema first in its defaults, so Hydra rejects a misspelt key or a value of the
  wrong type at compose time, and every parameter can be overridden on the command line
  (``attribution.ifr_multi_hop.hops=3``).
- ``build(node, where)`` instantiates the node; a bad value (refused by the constructor's checks) becomes a
  ``ConfigError`` naming the key.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

import yaml
from omegaconf import DictConfig

from ctxbench.errors import ConfigError

log = logging.getLogger(__name__)

SCHEMA_GROUP = "schema"


def find_targets(conf_dir: str | Path) -> dict[tuple[str, str], str]:
    """``{(group, option): target}`` for every option file of a config group whose node names a ``_target_`` (at the
    top of the file, or under its one top-level key for groups whose options are selected several at a time)."""
    conf_dir = Path(conf_dir)
    found = {}
    for path in sorted(conf_dir.glob("*/**/*.yaml")):
        group = path.parent.relative_to(conf_dir).as_posix()
        if group.split("/")[0] in ("hydra", "experiment"):
            continue
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(doc, dict):
            continue
        body = {k: v for k, v in doc.items() if k != "defaults"}
        if isinstance(body.get("_target_"), str):
            found[(group, path.stem)] = body["_target_"]
        elif len(body) == 1 and isinstance(next(iter(body.values())), dict) \
                and isinstance(next(iter(body.values())).get("_target_"), str):
            found[(group, path.stem)] = next(iter(body.values()))["_target_"]
    return found


def schema_of(target: str):
    """The structured config (a dataclass with ``_target_``) of a class, from its constructor's signature."""
    from hydra.utils import get_class
    from hydra_zen import builds

    return builds(get_class(target), populate_full_signature=True)


def register_part_schemas(conf_dir: str | Path) -> None:
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    for (group, option), target in find_targets(conf_dir).items():
        try:
            node = schema_of(target)
        except Exception as exc:  # an import error here would otherwise surface as "schema not found"
            raise ConfigError(f"{Path(conf_dir) / group / option}.yaml: _target_ {target} cannot be loaded: {exc}") \
                from exc
        cs.store(group=f"{SCHEMA_GROUP}/{group}", name=option, node=node)


def build(node: Any, where: str, kind: type = object) -> Any:
    """Instantiate one part (containers arrive as plain lists and dicts), which must be a ``kind``; errors name
    ``where`` (the config key)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    if not isinstance(node, (DictConfig, dict)) or "_target_" not in node:
        raise ConfigError(f"{where}: expected a config node with a _target_ class, got {node!r}")
    try:
        part = instantiate(node, _convert_="all")
    except InstantiationException as exc:
        raise ConfigError(f"{where}: {exc.__cause__ or exc}") from exc
    if not isinstance(part, kind):
        raise ConfigError(f"{where}: {type(part).__name__} is not a {kind.__module__}.{kind.__qualname__}")
    return part


def build_all(nodes: Mapping[str, Any], where: str, kind: type = object) -> dict[str, Any]:
    """Instantiate every part of a dict-valued group (``attribution``, ``mode``), keyed as in the config; each must be
    a ``kind`` and at least one must be selected."""
    if not nodes:
        raise ConfigError(f"{where}: nothing selected (choose one or more options: {where}=[a,b])")
    return {key: build(node, f"{where}.{key}", kind) for key, node in nodes.items()}
