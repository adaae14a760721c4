"""Structured-config schemas for Hydra, registered in the ConfigStore so a misspelt or unknown key is an error.

The stage configs are dataclasses here. Pluggable parts (``dataset``, ``attribution.<name>``, ``mode.<name>``) are
``_target_`` nodes: their schema is made from their class's constructor (``ctxbench.core.part``), never listed twice.
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
from ctxbench.core.part import param
from ctxbench.prompts.icl import ICLTemplate, box_template
from ctxbench.jobs.run_outputs import RunOutputs
from ctxbench.metrics.stats import StatsSettings


@dataclass
class DataConfig:
    """What every stage that reads a dataset with a model's tokenizer shares."""

    paths: Paths = field(default_factory=Paths)
    dataset: Any = MISSING  # a Dataset part (conf/dataset/<name>.yaml)
    model: ModelConfig = field(default_factory=ModelConfig)
    # The context length of the experiment: RULER tasks are generated at (and read from) this length
    # (their YAML says length: ${length}). One default for every stage (prepare, preview, sample_and_filter,
    # run_exp), so that a cache the sampling stage wrote is the one run_exp reads: the quick offline 512; the
    # paper's 1,024 is +experiment=table1's (and scripts/table1.sh's).
    length: int = param(512, ge=1)


@dataclass
class TrackingConfig:
    """What a stage's job reports beyond its files (docs/tracking.md)."""

    # experiment trackers (conf/logger/<name>.yaml), several at once
    logger: Dict[str, Any] = field(default_factory=dict)
    # the metric the job returns to an optimising sweeper (hydra/sweeper=optuna): faithfulness.row.RISE,
    # retrieval.ndcg_at_10, funnel.kept, ... (ctxbench.tracking.objective)
    objective: Optional[str] = None


@dataclass
class PromptConfig(DataConfig):
    """How a dataset row becomes the prompt of the sampling stage: in-context examples from ``pool`` chosen by the
    ``retriever``, rendered with ``template``."""

    retriever: Any = MISSING  # a Retriever part (conf/retriever/<name>.yaml, docs/retrievers.md)
    template: ICLTemplate = field(default_factory=box_template)  # docs/retrievers.md#templates-ctxbenchpromptsicl
    pool: Optional[str] = None  # a JSONL pool of worked examples; None = the shipped box pool


@dataclass
class ShardConfig:
    index: int = param(0, ge=0)
    count: int = param(1, ge=1)  # this run processes dataset rows index, index + count, ...


@dataclass
class SampleConfig(TrackingConfig, PromptConfig):
    """Stage 1 (docs/sampling.md)."""

    generator: Any = MISSING  # a Generator part (conf/generator/<name>.yaml)
    judge: Any = MISSING  # a Judge part (conf/judge/<name>.yaml)
    cache: Optional[str] = None  # the CachedExample cache; None = <paths.samples_dir>/<dataset.name>.jsonl
    max_examples: Optional[int] = param(None, ge=1)  # keep the first N judged-correct examples in dataset order
    # process only the first N rows of the dataset (a budget; a rerun may raise it)
    max_rows: Optional[int] = param(None, ge=1)
    shard: ShardConfig = field(default_factory=ShardConfig)
    merge: bool = False  # join shards 0..shard.count-1 of the cache instead of sampling
    # rows generated, judged and written at a time (a kill loses at most one chunk's work)
    chunk: int = param(16, ge=1)
    dry_run: bool = False
    progress: bool = True
    resume: Optional[str] = None  # latest | <job folder>: go on with that run (conf/hydra/default.yaml)


@dataclass
class EndpointScoring:
    """How run_exp sends its scoring passes to a served model (``model=openai`` / ``model=vllm``:
    ``models.endpoint_lm``); none of it changes a result."""

    concurrency: int = param(8, ge=1)  # requests in flight
    prompts_per_request: int = param(8, ge=1)  # edited inputs per completions request
    max_retries: int = param(5, ge=0)  # the SDK's retries of a failed request
    cache: bool = True  # keep the replies in the job's endpoint/ folder: a rerun of the job sends nothing twice


@dataclass
class RunConfig(TrackingConfig, RunOutputs, DataConfig):
    """Stage 2: what to attribute and score (and, from ``RunOutputs``: views, heatmaps, html, save_traces, stats)."""

    attribution: Dict[str, Any] = field(default_factory=dict)
    mode: Dict[str, Any] = field(default_factory=dict)
    retriever: Any = None  # a Retriever part: what mode=retrieval evaluates (docs/retrieval.md)
    reranker: Any = None  # a Reranker part: mode=retrieval rescores the top hits with it (null: NoReranker)
    max_examples: Optional[int] = param(None, ge=1)
    prompt_format: str = param("table1", choices=("table1", "bare"))
    seed: int = 0  # seeds every random choice of the run (the random baseline's draws)
    shard: ShardConfig = field(default_factory=ShardConfig)  # docs/scale-out.md: this job attributes one slice
    merge: List[str] = field(default_factory=list)  # shard job dirs (or folders of them) to merge instead of running
    # a task folder already holding result lines: a job scores only what it lacks, and merge=[...] starts from its
    # lines (a lane split over cores folds back into its folder; docs/scale-out.md)
    base: Optional[str] = None
    dry_run: bool = False
    # refuse up front a method or mode whose estimated memory on the longest input is above the memory free
    # (ctxbench.attribution.memory); false tries anyway
    memory_check: bool = True
    # the memory the run may use over the loaded model, in GiB; null: what is free when the run starts (a container's
    # cgroup limit below that is not seen: set it here)
    memory_budget_gib: Optional[float] = param(None, gt=0)
    progress: bool = True
    # latest | <job or sweep folder>: go on with that run instead of starting a new folder (conf/hydra/default.yaml)
    resume: Optional[str] = None
    endpoint: EndpointScoring = field(default_factory=EndpointScoring)  # a served model's scoring passes


@dataclass
class PrepareConfig(DataConfig):
    """prepare_data: the dataset is a RULER task (its num_samples and seed, and the run's length, say what to
    generate); the model's tokenizer measures lengths."""

    overwrite: bool = False


@dataclass
class ReportConfig:
    runs: List[str] = field(default_factory=list)  # multirun folders and/or run_exp job dirs
    # the token view whose figures fill the table; None: seq when every run scored it, else the one view all scored
    view: Optional[str] = None
    html: bool = True  # write report.html (docs/report.md): the table, and each run's tables, figures, heat maps
    heatmaps: int = 3  # examples per run shown in report.html (those the run stored heat-map data for)
    stats: StatsSettings = field(default_factory=StatsSettings)  # intervals and paired comparisons, from results.jsonl
    # a task and method scored by the same scorer in two runs: refused, or taken from the run listed later
    prefer_later: bool = False
    # jobs without summary.json: left out with a warning, or reported from their results so far, marked unfinished
    unfinished: bool = False
    paper: bool = False  # also the methods' order against the paper's Table 1 (resources/table1/paper.csv)
    caption: Optional[str] = None  # a line above the table saying what it explains (e.g. "gold continuation, no CoT")
    min_examples: int = 0  # a cell scored on fewer examples reads "too few (n)" instead of its figure
    # per method, a minimum in place of min_examples (e.g. {integrated_gradients: 3}: IG on fewer examples, shown
    # with its n and never in bold)
    min_examples_of: Dict[str, int] = field(default_factory=dict)
    # report folders (each with its table1.json, one per variant of the targets) set side by side with the paper's
    # Table 1 in variants.md
    variants: List[str] = field(default_factory=list)
    # report folders of one variant made with different models (model=...): which orderings hold in every model, in
    # families.md
    families: List[str] = field(default_factory=list)
    # report folders whose headlines overview.md sets out in orders and verdicts, from their table1.json alone
    overview: List[str] = field(default_factory=list)
    # folders of sampled caches (a CoT variant's samples/): each task's funnel is listed, explained or not
    samples: List[str] = field(default_factory=list)


@dataclass
class PreviewConfig(PromptConfig):
    """``exp/exp2/preview_prompts.py``: the prompts the sampling stage would send for the first ``n`` rows."""

    n: int = param(3, ge=1)
    output: Optional[str] = None  # also write one JSON line per row here


# The project's config folder (the package is installed from the project, editable).
CONF_DIR = Path(__file__).resolve().parents[3] / "conf"


def register_configs(conf_dir: str | Path = CONF_DIR) -> None:
    from hydra.core.config_store import ConfigStore

    from ctxbench.core.part import register_part_schemas

    cs = ConfigStore.instance()
    cs.store(name="sample_schema", node=SampleConfig)
    cs.store(name="run_schema", node=RunConfig)
    cs.store(name="prepare_schema", node=PrepareConfig)
    cs.store(name="report_schema", node=ReportConfig)
    cs.store(name="preview_schema", node=PreviewConfig)
    register_part_schemas(conf_dir)
    from ctxbench.stages.run_dirs import register_resolvers

    register_resolvers()  # hydra.run.dir / hydra.sweep.dir (conf/hydra/default.yaml)


def stage_config(cfg: Any, schema: type) -> Any:
    """A stage's settings as its dataclass (``schema``), read once where the stage starts. Keys the config leaves out
    take the dataclass's defaults, the one place they are written: a hand-made config (a test, a library call) gets
    the defaults the command line gets. For configs without part nodes (``ReportConfig``)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), cfg))


def to_plain(cfg: Any) -> Any:
    """A DictConfig/ListConfig as plain Python containers (interpolations resolved)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)
