"""Structured-config schemas for Hydra, registered in the ConfigStore so a misspelt or unknown key is an error.

Each config group has one schema (the union of its options' fields). ``attribution`` and ``mode`` are dictionaries keyed
by option name, so several options can be selected at once (``mode=[faithfulness,recovery]``) and stay separate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore

from ctxbench.models.spec import ModelConfig


@dataclass
class PathsConfig:
    root: str = "."
    data_dir: str = "data"  # generated RULER data: <data_dir>/ruler_multihop/<length>/<task>/validation.jsonl
    exp_data_dir: str = "exp/exp2/data"  # sampled CachedExample caches: <exp_data_dir>/<dataset>.jsonl
    cache_dir: str = ".cache"  # dequantised models, embeddings


@dataclass
class DatasetConfig:
    name: str = "???"
    kind: str = "ruler"  # morehopqa | ruler | jsonl
    path: Optional[str] = None  # MoreHopQA JSON, or any RULER-format .jsonl
    length: Optional[int] = None  # RULER length folder; None = the single one present
    use_cache: bool = True  # a sampled cache <exp_data_dir>/<name>.jsonl wins over raw data
    generate_missing: bool = False  # generate a missing RULER task (prepare_data) before loading it
    num_samples: int = 500  # for on-demand generation
    generation_seed: int = 42
    morehopqa_path: Optional[str] = None  # source of hotpotqa_long documents when generating


@dataclass
class RetrieverConfig:
    name: str = "zero"  # zero | fixk | random | topk | bm25
    ice_num: int = 0
    fix_id_list: List[int] = field(default_factory=list)
    seed: int = 43
    exclude_self: bool = False
    pool_path: Optional[str] = None  # the pool of in-context examples (train split); None = the dataset itself


@dataclass
class AttributionConfig:
    """One method's settings; each method reads only the fields it knows (ctxbench.attribution.base.method_parameters)."""

    method: str = "???"
    hops: int = 1  # multi-hop IFR: hops K through the chain of thought (Table 1: 1 for faithfulness, 3 for recovery)
    hop0: str = "all_gen"  # ifr_multi_hop_both: hop 0 over all_gen (Table 1) or over the sink ("sink")
    tau: float = 0.0  # IFR: proximities below tau count 0
    recompute_attention: bool = True  # IFR: rebuild attention per layer (O(heads T^2) memory) instead of storing it
    forward_attn_impl: Optional[str] = "sdpa"  # IFR capture pass kernel when recomputing; null keeps the loaded one
    sink_chunk: int = 64  # IFR: sink rows per chunk
    chunk_elems: int = 4194304  # IFR: elements per (sources x heads x d) chunk
    ig_steps: int = 20  # integrated gradients (and attention x IG)
    ig_batch: int = 4  # IG steps per backward pass
    times_ig: bool = False  # attention: multiply by integrated gradients, as the reference does
    layer: int = -1  # attention: which layer's head-mean attention
    seed: int = 0  # random
    save_traces: bool = False  # write per-example hop vectors as .npz under traces/


@dataclass
class ModeConfig:
    steps: int = 20  # faithfulness: deletion steps
    batch_size: int = 4  # faithfulness: perturbed inputs per forward pass (CPU: 1-4; GPU: more)
    fraction: float = 0.1  # recovery: top fraction of prompt tokens


@dataclass
class JudgeConfig:
    kind: str = "rule"  # rule | model | openai
    model: Optional[ModelConfig] = None


@dataclass
class SampleConfig:
    paths: PathsConfig = field(default_factory=PathsConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    retriever: RetrieverConfig = field(default_factory=RetrieverConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    max_examples: Optional[int] = None
    seed: int = 0
    dry_run: bool = False


@dataclass
class RunConfig(SampleConfig):
    """Stage 2 reads what stage 1 does (its examples may come from the same raw data), plus what to attribute and score."""

    attribution: Dict[str, AttributionConfig] = field(default_factory=dict)
    mode: Dict[str, ModeConfig] = field(default_factory=dict)
    prompt_format: str = "table1"  # table1 | bare
    views: List[str] = field(default_factory=lambda: ["seq", "row", "rec"])  # token views scored by every mode
    heatmaps: int = 0  # write an HTML heat map of the prompt attribution for the first N examples
    progress: bool = True


@dataclass
class PrepareConfig:
    paths: PathsConfig = field(default_factory=PathsConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)  # whose tokenizer measures lengths
    length: int = 1024
    num_samples: int = 500
    seed: int = 42
    overwrite: bool = False


@dataclass
class ReportConfig:
    runs: List[str] = field(default_factory=list)  # multirun folders and/or run_exp job dirs
    view: str = "seq"  # which token view's figures fill the table (the paper's Table 1: seq)


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="sample_schema", node=SampleConfig)
    cs.store(name="run_schema", node=RunConfig)
    cs.store(name="prepare_schema", node=PrepareConfig)
    cs.store(name="report_schema", node=ReportConfig)


def to_plain(cfg: Any) -> Any:
    """A DictConfig/ListConfig as plain Python containers (interpolations resolved)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)
