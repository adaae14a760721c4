"""The one base of every pluggable part: attribution methods, scorers, retrievers, rerankers, generators, judges.

A part is a dataclass whose fields are its parameters (``register_part_schemas`` turns them into the config schema).
This module says, once for all parts:

- **which settings change results.** A field declared with ``neutral(...)`` (batching, chunking, workers, cache
  folders, progress bars) does not; ``settings_of(part)`` is every other field, nested parts included, plus the part's
  ``identity()`` (what files its model was loaded from). That one dictionary is the run fingerprint's
  (``stages/run.py``), the stored search results' key (``retrieval/search.py``) and what the report's consistency
  check compares (``reporting/aggregate.py``): a new part marks its own neutral fields where it declares them, and no
  list elsewhere has to learn them.
- **which values a parameter may take.** A field declared with ``param(default, ge=..., choices=...)`` (or
  ``neutral(default, ge=...)``) carries its bounds or choices; they are checked once, when the part is built (before
  the part's own ``__post_init__`` runs, so that checks of one field against another see valid fields), and a bad
  value is one ``ConfigError`` line in one style: ``hops=-1: must be >= 0``, ``method='x': expected one of a, b``
  (the stage puts the config key in front: ``attribution.ifr_multi_hop: hops=-1: must be >= 0``).
- **how the loaded LM is handed over.** A part with ``needs_lm`` is given the ``model`` group's loaded causal LM (a
  ``ctxbench.models.LoadedLM``) through ``use_lm`` by the stage, which loads the model only when some part needs it.

Building parts from config nodes:

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

import dataclasses
import functools
import json
import logging
import typing
from pathlib import Path
from typing import Any, ClassVar, Mapping, Optional

import yaml
from omegaconf import DictConfig

from ctxbench.core.errors import ConfigError

NEUTRAL = "ctxbench.neutral"
CHECK = "ctxbench.check"


def _bound(x: float) -> str:
    return repr(x) if isinstance(x, float) and not x.is_integer() else str(int(x) if isinstance(x, float) else x)


@dataclasses.dataclass(frozen=True)
class Check:
    """The values one parameter may take: bounds (``ge``, ``gt``, ``le``, ``lt``) and/or ``choices``; ``None`` passes
    only for a ``nullable`` field (one whose default is None: "unset", "automatic")."""

    ge: Optional[float] = None
    gt: Optional[float] = None
    le: Optional[float] = None
    lt: Optional[float] = None
    choices: Optional[tuple] = None
    nullable: bool = False

    def problem(self, value: Any) -> Optional[str]:
        """Why ``value`` is refused, or None."""
        if value is None:
            return None if self.nullable else "must be set"
        if self.choices is not None and value not in self.choices:
            return "expected one of " + ", ".join("null" if c is None else str(c) for c in self.choices)
        bounded = any(b is not None for b in (self.ge, self.gt, self.le, self.lt))
        if not bounded:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "must be a number"
        lo = (self.ge, "[") if self.ge is not None else (self.gt, "(") if self.gt is not None else None
        hi = (self.le, "]") if self.le is not None else (self.lt, ")") if self.lt is not None else None
        ok = (lo is None or (value >= lo[0] if lo[1] == "[" else value > lo[0])) and \
             (hi is None or (value <= hi[0] if hi[1] == "]" else value < hi[0]))
        if ok:
            return None
        if lo is not None and hi is not None:
            return f"must lie in {lo[1]}{_bound(lo[0])}, {_bound(hi[0])}{hi[1]}"
        if lo is not None:
            return f"must be {'>=' if lo[1] == '[' else '>'} {_bound(lo[0])}"
        return f"must be {'<=' if hi[1] == ']' else '<'} {_bound(hi[0])}"


def _field(default: Any, default_factory: Any, is_neutral: bool, check: Optional[Check]) -> Any:
    metadata: dict[str, Any] = {}
    if is_neutral:
        metadata[NEUTRAL] = True
    if check is not None:
        metadata[CHECK] = check
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def _check(default: Any, ge, gt, le, lt, choices) -> Optional[Check]:
    if all(x is None for x in (ge, gt, le, lt, choices)):
        return None
    choices = None if choices is None else tuple(choices)
    # null is allowed where it is the default or one of the choices (bm25's stopwords: "en" or null)
    return Check(ge=ge, gt=gt, le=le, lt=lt, choices=choices,
                 nullable=default is None or (choices is not None and None in choices))


def param(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING,
          ge: Optional[float] = None, gt: Optional[float] = None, le: Optional[float] = None,
          lt: Optional[float] = None, choices: Optional[Any] = None) -> Any:
    """A dataclass field with the values it may take (module doc); checked when the part is built."""
    return _field(default, default_factory, False, _check(default, ge, gt, le, lt, choices))


def neutral(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING,
            ge: Optional[float] = None, gt: Optional[float] = None, le: Optional[float] = None,
            lt: Optional[float] = None, choices: Optional[Any] = None) -> Any:
    """A dataclass field that does not change what the part computes (only how fast, where it caches, what it
    shows): left out of ``settings_of``, so changing it keeps stored results usable. Bounds as in ``param``."""
    return _field(default, default_factory, True, _check(default, ge, gt, le, lt, choices))


def refuse(name: str, value: Any, problem: str) -> ConfigError:
    """The one message style of a refused parameter value (for checks that relate two fields): raise the result."""
    return ConfigError(f"{name}={value!r}: {problem}")


INT_TYPES = (int, "int", "Optional[int]")


def check_params(part: Any) -> None:
    """Every declared ``Check`` of a dataclass part, in field order (an ``int`` field's value must also be an integer:
    the config schema checks types, a part built in Python gets the same check); the first refused value raises
    ``ConfigError``."""
    for f in dataclasses.fields(part):
        check = f.metadata.get(CHECK)
        if check is None:
            continue
        value = getattr(part, f.name)
        problem = check.problem(value)
        if problem is None and value is not None and f.type in INT_TYPES \
                and (isinstance(value, bool) or not isinstance(value, int)):
            problem = "must be an integer"
        if problem is not None:
            raise refuse(f.name, value, problem)


def is_neutral(f: dataclasses.Field) -> bool:
    return bool(f.metadata.get(NEUTRAL))


def neutral_fields(cls: type) -> frozenset[str]:
    """The names of a part class's neutral fields (none for a class that is not a dataclass)."""
    if not dataclasses.is_dataclass(cls):
        return frozenset()
    return frozenset(f.name for f in dataclasses.fields(cls) if is_neutral(f))


def check_stage_config(values: Any, schema: type, where: str = "") -> None:
    """The declared checks of a stage config's dataclass (``schema``: ``ctxbench.stages.conf.RunConfig``, ...) applied
    to its composed values (a DictConfig or mapping), nested config dataclasses included (``shard.count=0: must be >=
    1``): a stage checks its own settings as a part's are checked, before it loads anything."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        check = f.metadata.get(CHECK)
        kind = hints.get(f.name)
        nested = isinstance(kind, type) and dataclasses.is_dataclass(kind) and _declares_checks(kind)
        # only checked values are read: reading resolves interpolations (paths.root=${hydra:runtime.cwd}), which
        # need a running Hydra app
        if (check is None and not nested) or f.name not in values:
            continue
        value = values[f.name]
        if check is not None and (problem := check.problem(value)) is not None:
            raise refuse(where + f.name, value, problem)
        if nested and value is not None:
            check_stage_config(value, kind, f"{where}{f.name}.")


@functools.cache
def _declares_checks(schema: type) -> bool:
    hints = typing.get_type_hints(schema)
    return any(CHECK in f.metadata or (isinstance(hints.get(f.name), type) and dataclasses.is_dataclass(
        hints[f.name]) and _declares_checks(hints[f.name])) for f in dataclasses.fields(schema))


class Part:
    """Mixin of every part class (module doc). ``name``: what results, logs and messages call the part by: the
    option's name (``conf/attribution/ifr_multi_hop.yaml`` -> ``ifr_multi_hop``); a dataset its own ``name`` field, a
    reranker its kind and model."""

    name: ClassVar[str] = ""
    needs_lm: ClassVar[bool] = False  # uses the `model` group's causal LM: the stage loads it and calls use_lm()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The declared checks run before a class's own __post_init__, whether or not it calls super(): a part cannot
        # forget them, and its cross-field checks see fields already known to be in range.
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__post_init__")
        if own is not None and not getattr(own, "_after_checks", False):
            @functools.wraps(own)
            def post_init(self, *args: Any, **kw: Any) -> None:
                check_params(self)
                own(self, *args, **kw)

            post_init._after_checks = True  # type: ignore[attr-defined]
            cls.__post_init__ = post_init  # type: ignore[attr-defined]

    def __post_init__(self) -> None:
        if dataclasses.is_dataclass(self):
            check_params(self)

    def use_lm(self, loaded_lm: Any) -> None:
        """Receive the ``model`` group's model (a ``ctxbench.models.LoadedLM``; None for an endpoint model). Parts
        without ``needs_lm`` ignore it."""

    def identity(self) -> Optional[dict[str, Any]]:
        """What the part's own model files are, when it loads any (a local folder's fingerprint, a hub id and
        revision, the dtype it runs in): part of its settings. None: it loads nothing of its own."""
        return None

    def settings(self) -> dict[str, Any]:
        return settings_of(self)


def target_of(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def settings_of(part: Any) -> Any:
    """Everything that changes a part's results, JSON-able: ``_target_``, its non-neutral fields (nested parts as
    their own settings) and its ``identity()`` under ``identity`` when it has one. Anything else is returned as a
    JSON value (tuples as lists, unknown objects as strings)."""
    if dataclasses.is_dataclass(part) and not isinstance(part, type):
        out: dict[str, Any] = {"_target_": target_of(part)}
        for f in dataclasses.fields(part):
            if f.init and not is_neutral(f):
                out[f.name] = settings_of(getattr(part, f.name))
        ident = part.identity() if isinstance(part, Part) else None
        if ident is not None:
            out["identity"] = settings_of(ident)
        return out
    if isinstance(part, dict):
        return {str(k): settings_of(v) for k, v in part.items()}
    if isinstance(part, (list, tuple)):
        return [settings_of(v) for v in part]
    return json.loads(json.dumps(part, default=str))


def _neutral_of_target(target: str) -> frozenset[str]:
    try:
        from hydra.utils import get_class

        return neutral_fields(get_class(target))
    except Exception:  # a run made with a part this checkout does not have: nothing is known neutral
        return frozenset()


def without_neutral(node: Any) -> Any:
    """A plain config with the neutral fields of its parts (dict nodes with an importable ``_target_``) removed:
    the config-side view of ``settings_of``, for records kept as configs (run fingerprints, the report's check)."""
    if isinstance(node, dict):
        target = node.get("_target_")
        drop = _neutral_of_target(target) if isinstance(target, str) else frozenset()
        return {k: without_neutral(v) for k, v in node.items() if k not in drop}
    if isinstance(node, list):
        return [without_neutral(v) for v in node]
    return node


# --- building parts from config nodes ----------------------------------------------------------------------------

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
