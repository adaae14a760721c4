"""Up-front memory estimates (ctxbench.attribution.memory): the model shapes read from each family's config, the terms
against hand-computed byte counts, every method and the faithfulness scorer estimated, the one-line refusal of the run
stage before any attribution, and (slow) the estimates against the peak resident memory measured on the real models."""

from __future__ import annotations

import re

import pytest

from ctxbench.attribution.memory import (GIB, WORKSPACE, ModelShape, Need, check_fits, forward_transient,
                                         ifr_capture, saved_for_backward, scored_logits)
from ctxbench.core.errors import ConfigError
from ctxbench.stages.run import RESULTS, run_stage

from helpers.cli import run_script
from helpers.configs import run_cfg, tmp_paths
from helpers.paths import CACHE_DIR
from helpers.peak_memory import measured_over_estimate
from helpers.tiny_models import make, method_classes, tiny_model

SMOLLM2 = ModelShape(layers=30, d=576, heads=9, kv_heads=3, head_dim=64, intermediate=1536, vocab=49152)


@pytest.mark.parametrize("family, intermediate, kv, rope, masks", [
    ("llama", 128, 2, 1, 0), ("qwen2", 128, 2, 1, 0), ("gemma3", 128, 2, 2, 2), ("gpt2", 256, 4, 0, 0)])
def test_shape_of_each_family(family, intermediate, kv, rope, masks):
    s = ModelShape.of(tiny_model(family))
    assert (s.layers, s.d, s.heads, s.kv_heads, s.head_dim, s.vocab, s.elem) == (2, 64, 4, kv, 16, 64, 4)
    # GPT-2's MLP is 4 d wide (n_inner unset); Gemma 3 keeps a rotary table and a T x T mask per attention type
    # (sliding and full), GPT-2 no rotary table; Qwen2's sliding window is off
    assert (s.intermediate, s.rope_tables, s.masks) == (intermediate, rope, masks)
    assert ModelShape.of(tiny_model("llama").double()).elem == 8
    assert s.eager  # loaded with eager attention, as run_exp loads models


def test_eager_attention_counts_where_a_pass_keeps_the_loaded_kernel():
    from dataclasses import replace

    eager = replace(SMOLLM2, eager=True)
    T, G = 4096, 1024
    layer = 9 * T * T * 4  # one layer's heads x T x T float32
    # the attention baseline's capture keeps the loaded kernel: one layer's scores, masked scores, probabilities
    assert make("attention").memory_need(eager, T, G).bytes - make("attention").memory_need(SMOLLM2, T, G).bytes \
        == 3 * layer
    # IFR and the gradients on sdpa (their default) form no T x T matrix; on the loaded eager kernel they do, and a
    # backward pass keeps every layer's
    assert make("ifr_multi_hop").memory_need(eager, T, G) == make("ifr_multi_hop").memory_need(SMOLLM2, T, G)
    assert (make("ifr_multi_hop", forward_attn_impl=None).memory_need(eager, T, G).bytes
            - make("ifr_multi_hop").memory_need(eager, T, G).bytes) == 3 * layer
    assert (make("attnlrp", forward_attn_impl=None).memory_need(eager, T, G).bytes
            - make("attnlrp").memory_need(eager, T, G).bytes) == 2 * 30 * layer


def test_terms_by_hand():
    # SmolLM2 at 1,024 tokens, 256 of them generated; per position and layer: 8 x 576 + 3 x 9 x 64 + 2 x (2 x 3 x 64)
    # + 5 x 1536 = 14,784 floats saved for the backward pass
    assert saved_for_backward(SMOLLM2, 1024) == WORKSPACE + 1024 * 30 * 14784 * 4 == WORKSPACE + 1_816_657_920
    # keys and values (384 floats) of every position and layer, one rotary table (2 x 64 per position), and for the
    # 256 rows the two residual streams and the queries (2 x 576 + 576)
    assert ifr_capture(SMOLLM2, 1024, 256) == (1024 * 30 * 384 + 1024 * 128 + 256 * 30 * 1728) * 4 == 100_794_368
    assert scored_logits(SMOLLM2, 256, batch=4) == 2 * 4 * 256 * 49152 * 4
    # one layer's MLP and residual tensors per row; Gemma 3's two T x T masks shared by an unpadded batch, one per row
    # and attention type in a padded one
    gemma = ModelShape(layers=18, d=640, heads=4, kv_heads=1, head_dim=256, intermediate=2048, vocab=262144,
                       rope_tables=2, masks=2)
    assert forward_transient(gemma, 1000, batch=4) == WORKSPACE + 4 * 1000 * (3 * 2048 + 3 * 640) * 4 + 2 * 1000 ** 2
    assert forward_transient(gemma, 1000, 4, padded=True) - forward_transient(gemma, 1000, 4) == 6 * 1000 ** 2
    assert forward_transient(SMOLLM2, 1000, 4, padded=True) - forward_transient(SMOLLM2, 1000, 4) == 4 * 1000 ** 2


def test_every_method_and_faithfulness_have_an_estimate_that_grows_with_length():
    from ctxbench.metrics.faithfulness import FaithfulnessScorer

    for name in method_classes():
        m = make(name)
        small, large = m.memory_need(SMOLLM2, 1024, 256), m.memory_need(SMOLLM2, 4096, 1024)
        assert isinstance(small, Need) and small.what, name
        assert large.bytes > small.bytes, name
    # IFR's capture and the gradients' activations are linear in length; the attention baseline keeps the capture
    for name in ("ifr_multi_hop_both", "ifr_all_positions", "attnlrp", "input_x_gradient"):
        m = make(name)
        assert m.memory_need(SMOLLM2, 4096, 1024).bytes < 4.6 * m.memory_need(SMOLLM2, 1024, 256).bytes, name
    # integrated gradients: ig_batch points share one backward pass
    assert (make("integrated_gradients", ig_batch=4).memory_need(SMOLLM2, 1024, 256).bytes
            > 3.5 * make("integrated_gradients", ig_batch=1).memory_need(SMOLLM2, 1024, 256).bytes)
    f = FaithfulnessScorer(batch_size=4)
    assert f.memory_need(SMOLLM2, 1024, 256).bytes > scored_logits(SMOLLM2, 256, batch=4)


def test_check_fits_names_every_part_that_does_not_fit_in_one_line():
    needs = [("attribution.attnlrp", Need(40 * GIB, "activations")), ("attribution.random", Need(1, "matrix")),
             ("attribution.ifr_multi_hop", None), ("mode.faithfulness", Need(30 * GIB, "passes"))]
    check_fits(needs[1:3], 32768, 8192, 20 * GIB, "memory available on the host")  # nothing over: no error
    with pytest.raises(ConfigError) as err:
        check_fits(needs, 32768, 8192, 20 * GIB, "memory available on the host")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("attribution.attnlrp about 40.0 GiB (activations); mode.faithfulness about 30.0 GiB (passes) "
                          "for an input of 32,768 tokens (8,192 generated), more than the 20.0 GiB of memory available "
                          "on the host")
    assert "random" not in msg and "memory_check=false" in msg


def test_run_stage_refuses_before_any_attribution(tmp_path):
    out = tmp_path / "job"
    cfg = run_cfg(tmp_path, "max_examples=2", "attribution=[ifr_multi_hop,random]", "memory_budget_gib=0.01")
    with pytest.raises(ConfigError, match=r"^attribution\.ifr_multi_hop about .* GiB \(IFR's capture of 30 layers\); "
                                          r"mode\.faithfulness about .* of memory_budget_gib"):
        run_stage(cfg, out)
    assert not (out / RESULTS).exists() or not (out / RESULTS).read_text()
    # a budget that holds them runs; memory_check=false skips the check
    summary = run_stage(run_cfg(tmp_path, "max_examples=1", "attribution=[random]", "mode=recovery",
                                "memory_budget_gib=4"), tmp_path / "ok")
    assert summary["random"]["examples"] == 1
    summary = run_stage(run_cfg(tmp_path, "max_examples=1", "attribution=[random]", "mode=recovery",
                                "memory_budget_gib=0.000001", "memory_check=false"), tmp_path / "unchecked")
    assert summary["random"]["examples"] == 1


def test_the_command_line_refusal_is_one_line(tmp_path):
    ran = run_script("run_exp.py", *tmp_paths(tmp_path, samples="cache"), "dataset=niah_mq_q2", "length=512",
                     "max_examples=1", "progress=false", "attribution=[attnlrp]", "mode=recovery",
                     "memory_budget_gib=0.05", f"hydra.run.dir={tmp_path / 'job'}")
    assert ran.returncode == 2, ran.stderr[-2000:]
    lines = [ln for ln in ran.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in ran.stderr
    assert re.match(r"error: attribution\.attnlrp about \d+\.\d GiB \(the activations of 30 layers kept for the "
                    r"backward passes\) for an input of [\d,]+ tokens", lines[0]), lines[0]
    assert not (tmp_path / "job" / RESULTS).exists() or not (tmp_path / "job" / RESULTS).read_text()


# --- the estimates against measured peaks (real models) ---------------------------------------------------------------

# The estimates hold the live tensors' peak (the allocator's slack removed: helpers.peak_memory), and are not so loose
# that they refuse runs that fit: 0.44-0.63 of them were measured (docs/benchmarks.md)
BAND = (0.3, 1.0)


@pytest.mark.slow
# (input x gradient shares ft_attnlrp's term: the activations kept for the backward pass)
@pytest.mark.parametrize("method", ["ifr_multi_hop_both", "attention", "ft_attnlrp", "perturbation", "faithfulness"])
def test_estimates_hold_the_measured_peak_on_smollm2(method):
    ratio = measured_over_estimate("smollm2", method, 1024, 8)
    print(f"\n{method}: measured / estimate {ratio:.2f}")
    assert BAND[0] < ratio < BAND[1]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ifr_multi_hop_both", "faithfulness"])
def test_estimates_hold_the_measured_peak_on_gemma3(method):
    """Gemma 3: its T x T masks and the 262k-token vocabulary's logits are counted."""
    ratio = measured_over_estimate("gemma3", method, 2048, 64)
    print(f"\n{method}: measured / estimate {ratio:.2f}")
    assert BAND[0] < ratio < BAND[1]


def test_an_input_past_the_models_positions_is_refused_naming_both_numbers():
    """length=100000 on a model of 8,192 positions used to start attributing a 99,999-token example: the run stage
    refuses before the first example, in one line with both numbers (the tiny Llama has 256 positions)."""
    from types import SimpleNamespace

    import torch

    from ctxbench.stages.run import check_context

    model = tiny_model("llama")
    assert model.config.max_position_embeddings == 256
    fits = [("a", SimpleNamespace(input_ids=torch.zeros(256, dtype=torch.long)))]
    check_context(model, fits, 200)
    long = fits + [("b", SimpleNamespace(input_ids=torch.zeros(300, dtype=torch.long)))]
    with pytest.raises(ConfigError, match=r"^length=290: example b is 300 tokens with its generation, more than the "
                                          r"model's 256 positions \(config.max_position_embeddings\)"):
        check_context(model, long, 290)


def test_a_length_past_the_models_positions_is_refused_before_data_or_model(tmp_path):
    """The new user's `length=100000`: refused from the model's config alone (SmolLM2 has 8,192 positions), before a
    task is generated or the model loaded, in one line naming both numbers; a length past the RULER generator's
    bound (128K) is refused by the dataset's own check. No data and no job folder are left."""
    for stage in ("run_exp.py", "prepare_data.py"):
        out = run_script(stage, "length=100000", f"paths.data_dir={tmp_path / 'data'}",
                         f"paths.model_cache_dir={CACHE_DIR}", cwd=tmp_path)
        assert out.returncode == 2 and out.stderr.strip().splitlines() == [
            "error: length=100000: more than model smollm2-135m's 8,192 positions (config.max_position_embeddings); "
            "use length<=8192"], out.stderr[-2000:]
    out = run_script("sample_and_filter.py", "dataset=niah_mq_q2", "length=9000", f"paths.data_dir={tmp_path / 'data'}",
                     f"paths.model_cache_dir={CACHE_DIR}", cwd=tmp_path)
    assert out.returncode == 2 and "error: length=9000: more than model smollm2-135m's 8,192 positions" in out.stderr
    out = run_script("run_exp.py", "length=200000", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "error: dataset: length=200000: must lie in [1, 131072]"]
    assert not (tmp_path / "data").exists()
    assert not [p for p in (tmp_path / "outputs").rglob("*") if p.is_file() or p.name.startswith("20")]  # no job
