"""The one base of every pluggable part: attribution methods, scorers, retrievers, rerankers, generators, judges.

A part is a dataclass whose fields are its parameters (``ctxbench.parts`` turns them into the config schema). This
module says, once for all parts:

- **which settings change results.** A field declared with ``neutral(...)`` (batching, chunking, workers, cache
  folders, progress bars) does not; ``settings_of(part)`` is every other field, nested parts included, plus the part's
  ``identity()`` (what files its model was loaded from). That one dictionary is the run fingerprint's
  (``stages/run.py``), the stored search results' key (``retrieval/search.py``) and what the report's consistency
  check compares (``reporting/aggregate.py``): a new part marks its own neutral fields where it declares them, and no
  list elsewhere has to learn them.
- **how the loaded LM is handed over.** A part with ``needs_lm`` is given the ``model`` group's loaded causal LM (a
  ``ctxbench.models.LoadedLM``) through ``use_lm`` by the stage, which loads the model only when some part needs it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar, Optional

NEUTRAL = "ctxbench.neutral"


def neutral(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field that does not change what the part computes (only how fast, where it caches, what it
    shows): left out of ``settings_of``, so changing it keeps stored results usable."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={NEUTRAL: True})


def is_neutral(f: dataclasses.Field) -> bool:
    return bool(f.metadata.get(NEUTRAL))


def neutral_fields(cls: type) -> frozenset[str]:
    """The names of a part class's neutral fields (none for a class that is not a dataclass)."""
    if not dataclasses.is_dataclass(cls):
        return frozenset()
    return frozenset(f.name for f in dataclasses.fields(cls) if is_neutral(f))


class Part:
    """Mixin of every part class (module doc)."""

    needs_lm: ClassVar[bool] = False  # uses the `model` group's causal LM: the stage loads it and calls use_lm()

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
