"""Structured-config schemas for Hydra, registered in the ConfigStore so a misspelt or unknown key is an error.

The stage configs are dataclasses here. Pluggable parts (``dataset``, ``attribution.<name>``, ``mode.<name>``) are
``_target_`` nodes: their schema is made from their class's constructor (``ctxbench.parts``), never listed twice.
``attribution`` and ``mode`` are dictionaries keyed by option name, so several options can be selected at once
(``mode=[faithfulness,recovery]``) and stay separate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from ctxbench.datasets.base import Paths
from ctxbench.models.spec import ModelConfig
from ctxbench.prompts.icl import ICLTemplate, box_template


@dataclass
class SampleConfig:
    paths: Paths = field(default_factory=Paths)
    dataset: Any = MISSING
    retriever: Any = MISSING  # a Retriever part (conf/retriever/<name>.yaml, docs/retrievers.md)
    model: ModelConfig = field(default_factory=ModelConfig)
    judge: Any = MISSING  # a Judge part (conf/judge/<name>.yaml, _target_)
    # a Generator part (conf/generator/<name>.yaml, _target_; sample.yaml selects hf). None, not MISSING: RunConfig
    # inherits this schema and run.yaml selects no generator.
    generator: Any = None
    # The context length of the experiment: RULER tasks are generated at (and read from) this length
    # (their YAML says length: ${length}); the paper's 1,024 unless a config or the command line says otherwise.
    length: int = 1024
    max_examples: Optional[int] = None
    dry_run: bool = False


@dataclass
class RunConfig(SampleConfig):
    """Stage 2 reads what stage 1 does (its examples may come from the same raw data), plus what to attribute and score."""

    attribution: Dict[str, Any] = field(default_factory=dict)
    mode: Dict[str, Any] = field(default_factory=dict)
    prompt_format: str = "table1"  # table1 | bare
    views: List[str] = field(default_factory=lambda: ["seq", "row", "rec"])  # token views scored by every mode
    heatmaps: int = 0  # write an HTML heat map of the prompt attribution for the first N examples
    save_traces: bool = False  # write per-example hop vectors as .npz under traces/<method>/
    seed: int = 0  # seeds every random choice of the run (the random baseline's draws)
    progress: bool = True


@dataclass
class PrepareConfig:
    paths: Paths = field(default_factory=Paths)
    dataset: Any = MISSING  # a RULER task: its length, num_samples and seed say what to generate
    model: ModelConfig = field(default_factory=ModelConfig)  # whose tokenizer measures lengths
    length: int = 1024  # as in SampleConfig
    overwrite: bool = False


@dataclass
class ReportConfig:
    runs: List[str] = field(default_factory=list)  # multirun folders and/or run_exp job dirs
    view: str = "seq"  # which token view's figures fill the table (the paper's Table 1: seq)


@dataclass
class PreviewConfig:
    """``exp/exp2/preview_prompts.py``: the prompts the sampling stage would send for the first ``n`` rows."""

    paths: Paths = field(default_factory=Paths)
    dataset: Any = MISSING
    retriever: Any = MISSING
    model: ModelConfig = field(default_factory=ModelConfig)  # whose tokenizer (chat template) formats the prompts
    template: ICLTemplate = field(default_factory=box_template)  # docs/retrievers.md#templates
    pool: Optional[str] = None  # a JSONL pool of worked examples; None = the shipped box pool
    n: int = 3
    output: Optional[str] = None  # also write one JSON line per row here
    length: int = 1024  # as in SampleConfig (RULER datasets read it)


# The project's config folder (the package is installed from the project, editable).
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def register_configs(conf_dir: str | Path = CONF_DIR) -> None:
    from hydra.core.config_store import ConfigStore

    from ctxbench.parts import register_part_schemas

    cs = ConfigStore.instance()
    cs.store(name="sample_schema", node=SampleConfig)
    cs.store(name="run_schema", node=RunConfig)
    cs.store(name="prepare_schema", node=PrepareConfig)
    cs.store(name="report_schema", node=ReportConfig)
    cs.store(name="preview_schema", node=PreviewConfig)
    register_part_schemas(conf_dir)


def to_plain(cfg: Any) -> Any:
    """A DictConfig/ListConfig as plain Python containers (interpolations resolved)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)
