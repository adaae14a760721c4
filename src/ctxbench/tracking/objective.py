"""The objective of an optimising sweep (``objective=...``, ``hydra/sweeper=optuna``; docs/tracking.md#optuna): one
of the job's metrics (``ctxbench.tracking.record``), named with dots, which the stage's task returns to the sweeper,
and its direction, taken from what declares the metric.

- ``<scorer>.<view>.<metric>`` (``faithfulness.row.RISE``, ``recovery.row.recall``): the mean over the job's examples
  of the one attribution method of the job; ``<method>.<scorer>.<view>.<metric>`` when the job has several. The
  direction is the scorer's (``Scorer.metrics()``: RISE and MAS lower is better, recall higher).
- ``retrieval.<metric>`` (``retrieval.ndcg_at_10``): mode=retrieval's final ranking, averaged over the splits; every
  IR metric there is higher-is-better.
- ``funnel.<count>`` (``funnel.kept``): sample_and_filter's funnel; counts of rows that got through are
  higher-is-better, ``funnel.rejections.<reason>`` lower.
"""

from __future__ import annotations

from typing import Any

from ctxbench.core.errors import ConfigError
from ctxbench.tracking.record import JobRecord, metric_name

MAXIMIZE, MINIMIZE = "maximize", "minimize"


def objective_key(objective: str) -> str:
    return metric_name(*objective.split("."))


def objective_value(objective: str, record: JobRecord) -> float:
    """The objective's value among the job's metrics; a name that is not there, or that several methods have, is one
    ``ConfigError`` line."""
    key = objective_key(objective)
    if key in record.metrics:
        return record.metrics[key]
    depth = key.count("/") + 1
    found = {k: v for k, v in record.metrics.items() if k.endswith("/" + key) and k.count("/") == depth}
    if len(found) == 1:
        return next(iter(found.values()))
    if found:
        methods = ", ".join(sorted(k.split("/", 1)[0] for k in found))
        raise ConfigError(f"objective={objective}: the job has it for several methods ({methods}); name one, e.g. "
                          f"objective={sorted(found)[0].split('/', 1)[0]}.{objective}")
    names = sorted({k.replace("/", ".") for k in record.metrics if not k.endswith(("/ci_low", "/ci_high"))})
    raise ConfigError(f"objective={objective}: not among the job's metrics"
                      + (f" ({', '.join(names[:8])}{', ...' if len(names) > 8 else ''})" if names else ""))


def objective_direction(objective: str, mode: Any = None) -> str:
    """``maximize`` or ``minimize`` for ``objective`` (module doc); ``mode``: the config's ``mode`` node, whose
    scorers declare their metrics' directions."""
    parts = objective.split(".")
    if parts[0] == "retrieval":
        return MAXIMIZE
    if parts[0] == "funnel":
        return MINIMIZE if len(parts) > 1 and parts[1] == "rejections" else MAXIMIZE
    from ctxbench.metrics.scorer import Scorer
    from ctxbench.core.part import build

    mode = dict(mode or {})
    for scorer_key, metric in ((parts[0], parts[-1]), (parts[1] if len(parts) > 1 else "", parts[-1])):
        if scorer_key in mode:
            scorer = build(mode[scorer_key], f"mode.{scorer_key}")
            if isinstance(scorer, Scorer):
                for m in scorer.metrics():
                    if metric_name(m.key) == metric_name(metric):
                        return MAXIMIZE if m.higher_is_better else MINIMIZE
                raise ConfigError(f"objective={objective}: mode {scorer_key} has no metric {metric} (it has "
                                  f"{', '.join(m.key for m in scorer.metrics())})")
    raise ConfigError(f"objective={objective}: no selected mode, retrieval or funnel names it (modes: "
                      f"{', '.join(mode) or 'none'}); e.g. objective=faithfulness.row.RISE, retrieval.ndcg_at_10, "
                      f"funnel.kept")


def direction_resolver(objective: Any, *, _root_: Any) -> str:
    """``${ctxbench.objective_direction:${objective}}`` (conf/hydra/sweeper/optuna.yaml): the direction of the
    config's objective, from the config's own modes."""
    if objective is None:
        raise ConfigError("hydra/sweeper=optuna optimises the job's objective: set one, e.g. "
                          "objective=retrieval.ndcg_at_10 or objective=faithfulness.row.RISE")
    return objective_direction(str(objective), _root_.get("mode"))


# What `hydra/sweeper=optuna` (the hydra-optuna-sweeper plugin's own option, which a config file of the same name
# cannot replace) gets unless the command line says otherwise: the objective's direction, and a failed trial that is
# recorded as failed instead of ending the study (the study fails only when no trial completes).
OPTUNA_DEFAULTS = {"hydra.sweeper.direction": "'${ctxbench.objective_direction:${objective}}'",
                   "hydra.sweeper.max_failure_rate": "1.0"}


def with_sweeper_defaults(args: list[str]) -> list[str]:
    """``args`` (a command line's arguments) with ``OPTUNA_DEFAULTS`` added when they select the Optuna sweeper."""
    if not any(a.lstrip("+") == "hydra/sweeper=optuna" for a in args):
        return args
    given = {a.split("=", 1)[0].lstrip("+~") for a in args}
    return args + [f"{k}={v}" for k, v in OPTUNA_DEFAULTS.items() if k not in given]
