"""The model-free controls: copy_match's runs and idf tie-break, the position prior and the length prior against
hand-computed values, their matrices' layout, random's token matrix (as it always was) and its per-source draws (no
length prior in LDS), and a controls-only recovery run that loads no model weights."""

import json
import logging
import math
from dataclasses import fields

import numpy as np
import pytest
import torch

from ctxbench.attribution.baselines import RandomAttributor
from ctxbench.attribution.controls import (CONTROL_METHODS, CopyMatchAttributor, LengthAttributor, PositionAttributor,
                                           copy_run_lengths, prompt_idf)
from ctxbench.evaluation import view_weights
from ctxbench.metrics.lds import lds
from ctxbench.metrics.source_ablation import SourceAblations
from ctxbench.metrics.topk import top_sources
from ctxbench.prompts.formats import ModelInput

PROMPT = [1, 2, 3, 9, 1, 2]
TARGET = [1, 2, 3, 4]
# target[0:3] = prompt[0:3] (a run of 3), target[0:2] = prompt[4:6] (a run of 2), target[3] nowhere
RUNS = [[3, 3, 3, 0, 2, 2],
        [3, 3, 3, 0, 2, 2],
        [3, 3, 3, 0, 0, 0],
        [0, 0, 0, 0, 0, 0]]


def test_copy_runs_by_hand():
    np.testing.assert_array_equal(copy_run_lengths(PROMPT, TARGET), RUNS)
    # the run [6, 7] credits both of its prompt tokens from both of its target tokens; a single "6" later only its own
    np.testing.assert_array_equal(copy_run_lengths([5, 6, 7], [6, 7, 8, 6]), [[0, 2, 2], [0, 2, 2], [0, 0, 0],
                                                                              [0, 1, 0]])
    assert copy_run_lengths([], [1]).shape == (1, 0) and copy_run_lengths([1], []).shape == (0, 1)


def test_idf_by_hand():
    np.testing.assert_allclose(prompt_idf(PROMPT), [math.log(3), math.log(3), math.log(6), math.log(6),
                                                    math.log(3), math.log(3)])


def _input():
    ids = [50, *PROMPT, 51, *TARGET]  # a template token, the prompt, a template token, the generation
    return ModelInput(input_ids=torch.tensor(ids), prompt_positions=torch.arange(1, 7), prompt_offsets=[],
                      gen_start=8, text="")


def test_copy_match_by_hand():
    res = CopyMatchAttributor().attribute(None, None, _input(), sink_span=(0, 3))
    tie = [math.log(3), math.log(3), math.log(6), math.log(6), math.log(3), math.log(3)]
    best = [3, 3, 3, 0, 2, 2]  # the longest run over each prompt token, from any target token: the same every row
    want = np.array([[r + t / (math.log(6) + 1) if r else 0.0 for r, t in zip(best, tie)]] * 4)
    np.testing.assert_allclose(res.matrix[:, :6], want, rtol=1e-6)
    np.testing.assert_array_equal(res.matrix[:, 6:], 0.0)  # no credit to generated tokens
    # the idf tie-break orders equal runs (the rarer "3" above "1") and never lifts a run-2 token over a run-3 one
    assert res.matrix[3, 2] > res.matrix[3, 0] and res.matrix[0, 4] < res.matrix[0, 0]


def test_position_prior_and_rows_left_unread():
    res = PositionAttributor().attribute(None, None, _input(), rows=[1, 2])
    np.testing.assert_allclose(res.matrix[1:3, :6], [[i / 6 for i in range(1, 7)]] * 2, rtol=1e-6)
    assert np.isnan(res.matrix[[0, 3]]).all() and (res.matrix[1:3, 6:] == 0).all()
    assert list(res.rows_written) == [1, 2]


def test_a_controls_only_recovery_run_loads_no_model(tmp_path, monkeypatch, caplog):
    from helpers.configs import run_cfg

    import ctxbench.stages.run as run

    def refuse(*a, **k):
        raise AssertionError("a controls-only recovery run loaded the model")

    monkeypatch.setattr(run, "load_causal_lm", refuse)
    cfg = run_cfg(tmp_path, "dataset.num_samples=4", "attribution=[copy_match,position,length,random]",
                  "mode=recovery", "views=[seq,row]")
    with caplog.at_level(logging.INFO, logger="ctxbench.stages.run"):
        summary = run.run_stage(cfg, tmp_path / "job")
    assert "no model weights loaded, tokenizer only" in caplog.text
    recall = {m: summary[m]["recovery"]["row"]["recall"] for m in ("copy_match", "position", "length", "random")}
    assert all(r["n"] == 4 for r in recall.values())
    assert all(0.0 <= r["mean"] <= 1.0 for r in recall.values())
    lines = [json.loads(x) for x in (tmp_path / "job" / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 16 and {r["method"] for r in lines} == {"copy_match", "position", "length", "random"}


def test_a_control_with_a_model_mode_still_loads_the_model(tmp_path, monkeypatch):
    import ctxbench.stages.run as run
    from helpers.configs import run_cfg

    class Loaded(Exception):
        pass

    def loaded(*a, **k):
        raise Loaded

    monkeypatch.setattr(run, "load_causal_lm", loaded)
    with pytest.raises(Loaded):
        run.run_stage(run_cfg(tmp_path, "dataset.num_samples=1", "attribution=[copy_match]", "mode=faithfulness"),
                      tmp_path / "job")


# --- random: one draw per unit a metric scores ------------------------------------------------------------------

LENGTHS = [2, 4, 8, 16, 32, 64]  # the sentences of a synthetic prompt: very different lengths


def _sources(lengths=LENGTHS) -> list[np.ndarray]:
    ends = np.cumsum(lengths)
    return [np.arange(e - n, e) for n, e in zip(lengths, ends)]


def _long_input(example: int) -> ModelInput:
    P = sum(LENGTHS)
    prompt = np.random.default_rng(example).integers(100, 1000, P).tolist()
    ids = [50, *prompt, 51, 7, 8, 9]
    return ModelInput(input_ids=torch.tensor(ids), prompt_positions=torch.arange(1, P + 1), prompt_offsets=[],
                      gen_start=P + 2, text="")


def test_random_has_no_length_prior_in_lds_and_topk():
    """Targets that fall with the length of what is removed: summed token noise predicts them (LDS > 0, the top
    source is the longest), random's per-source draw does not (mean LDS ~ 0 over 200 seeds)."""
    sources = _sources()
    ab = SourceAblations(sources, {}, {}, None, {})
    mi = _long_input(0)
    lengths = np.array(LENGTHS, dtype=float)
    per_source, summed, uncentred, top_per_source, top_summed = [], [], [], 0, 0
    for seed in range(200):
        res = RandomAttributor(seed=seed).attribute(None, None, mi, sink_span=(0, 2))
        w = view_weights(res, (0, 2), ["seq"])["seq"]
        masks = np.random.default_rng([seed, 1]).random((32, len(sources))) < 0.5
        targets = masks @ lengths - lengths.sum()  # a log-probability: lower the more tokens removed
        own, total = ab.source_scores(w, res.source_scores), ab.source_scores(w)
        per_source.append(lds(masks, targets, own))
        summed.append(lds(masks, targets, total))
        uncentred.append(lds(masks, targets, (own + 1) / 2))  # the same draws in [0, 1)
        top_per_source += int(top_sources(own, 1)[0] == len(LENGTHS) - 1)
        top_summed += int(top_sources(total, 1)[0] == len(LENGTHS) - 1)
    per_source = [x for x in per_source if x is not None]
    summed = [x for x in summed if x is not None]
    assert len(per_source) >= 190 and len(summed) >= 190
    assert abs(np.mean(per_source)) < 0.1  # chance
    assert np.mean(summed) > 0.5  # the sum of token noise: a length prior
    # draws all >= 0 would still score: any positive weights predict "more kept, higher target" (hence centred)
    assert np.mean([x for x in uncentred if x is not None]) > 0.3
    assert top_summed >= 190 and top_per_source < 80  # the longest sentence first: always vs 1 in 6


def test_random_token_matrix_is_the_one_it_always_was():
    """The token draws (RISE, MAS, recovery) are unchanged: the same generator, seed and layout as before the
    per-source draws, and no new parameter (the config fingerprint stays)."""
    mi = _input()
    res = RandomAttributor(seed=7).attribute(None, None, mi)
    ids = np.array([50, *PROMPT, 51, *TARGET], dtype=np.uint64)
    full = np.random.default_rng([7, int(ids.sum() % (1 << 63)), ids.size]).random((4, ids.size), dtype=np.float32)
    want = full[:, [1, 2, 3, 4, 5, 6, 8, 9, 10, 11]]  # the prompt's columns, then the generation's
    want[:, 6:] = np.where(np.tri(4, 4, -1, dtype=bool), want[:, 6:], 0.0)  # the causal past only
    np.testing.assert_array_equal(res.matrix, want)
    assert [f.name for f in fields(RandomAttributor)] == ["seed"]
    assert RandomAttributor(seed=7).settings() == {"_target_": "ctxbench.attribution.baselines.RandomAttributor",
                                                   "seed": 7}


def test_random_source_draws_are_reproducible_and_differ_across_examples():
    sources = _sources()
    draw = RandomAttributor(seed=7).attribute(None, None, _long_input(0)).source_scores
    first = draw(sources)
    assert first.shape == (6,) and ((-1 <= first) & (first < 1)).all()
    np.testing.assert_array_equal(first, draw(sources))  # every call (LDS, top-k, each view) the same
    again = RandomAttributor(seed=7).attribute(None, None, _long_input(0)).source_scores(sources)
    np.testing.assert_array_equal(first, again)  # the same example, the same draws
    other_example = RandomAttributor(seed=7).attribute(None, None, _long_input(1)).source_scores(sources)
    other_seed = RandomAttributor(seed=8).attribute(None, None, _long_input(0)).source_scores(sources)
    assert not np.allclose(first, other_example) and not np.allclose(first, other_seed)
    # one draw per source, whatever its length
    np.testing.assert_array_equal(draw([np.arange(1)] * 6), first)


# --- length: the length prior as a row -------------------------------------------------------------------------

STORY = "Ann sings. The old grey dog slept by the warm fire all day long. Bo ran home."
STORY_TOKENS = [" Ann", " sings", ".",
                " The", " old", " grey", " dog", " slept", " by", " the", " warm", " fire", " all", " day", " long",
                ".", " Bo", " ran", " home", "."]
HAND = [3, 13, 4]  # the three sentences' token counts, counted on STORY_TOKENS


def test_length_scores_by_hand(smol_tokenizer):
    from ctxbench.attribution.base import InputContext
    from ctxbench.attribution.context_cite import source_sentences
    from ctxbench.attribution.perturbation import SentenceUnits
    from ctxbench.prompts.formats import build_model_input

    tok = smol_tokenizer
    mi = build_model_input(tok, STORY, "Ann.", "table1")
    assert [tok.decode([int(mi.input_ids[p])]) for p in mi.prompt_positions] == STORY_TOKENS
    res = LengthAttributor().attribute(None, tok, mi, sink_span=(0, 0))
    row = np.repeat(HAND, HAND).astype(np.float32)  # each token: its sentence's count
    np.testing.assert_array_equal(res.matrix[:, :mi.P], np.broadcast_to(row, (mi.G, mi.P)))
    np.testing.assert_array_equal(res.matrix[:, mi.P:], 0.0)
    # the sources as source_ablation makes them; a source scores its token count, not the sum of its tokens' scores
    ctx = InputContext.from_model_input(None, mi)
    units = SentenceUnits.of(tok, ctx)
    ab = SourceAblations([units.prompt[u] for u in source_sentences(units, ctx)], {}, {}, None, {})
    w = res.matrix[0, :mi.P]
    np.testing.assert_array_equal(ab.source_scores(w, res.source_scores), HAND)
    np.testing.assert_array_equal(ab.source_scores(w), np.square(HAND))  # what the sum would give
    with pytest.raises(ValueError, match="tokenizer"):
        LengthAttributor().attribute(None, None, mi)


def test_length_is_a_control_built_from_its_config():
    from helpers.configs import compose_stage

    from ctxbench.core.part import build_all
    from ctxbench.reporting.controls import is_control

    cfg = compose_stage("run", "attribution=[length,random]")
    built = build_all(cfg.attribution, "attribution")
    assert isinstance(built["length"], LengthAttributor) and isinstance(built["random"], RandomAttributor)
    assert not LengthAttributor.needs_model and LengthAttributor.log_probs_only
    assert "length" in CONTROL_METHODS and is_control("length")
