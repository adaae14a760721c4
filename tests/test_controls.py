"""The model-free controls: copy_match's runs and idf tie-break and the position prior against hand-computed values,
their matrices' layout, and a controls-only recovery run that loads no model weights."""

import json
import logging
import math

import numpy as np
import pytest
import torch

from ctxbench.attribution.controls import (CopyMatchAttributor, PositionAttributor, copy_run_lengths, prompt_idf)
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
    cfg = run_cfg(tmp_path, "dataset.num_samples=4", "attribution=[copy_match,position,random]", "mode=recovery",
                  "views=[seq,row]")
    with caplog.at_level(logging.INFO, logger="ctxbench.stages.run"):
        summary = run.run_stage(cfg, tmp_path / "job")
    assert "no model weights loaded, tokenizer only" in caplog.text
    recall = {m: summary[m]["recovery"]["row"]["recall"] for m in ("copy_match", "position", "random")}
    assert all(r["n"] == 4 for r in recall.values())
    assert all(0.0 <= r["mean"] <= 1.0 for r in recall.values())
    lines = [json.loads(x) for x in (tmp_path / "job" / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 12 and {r["method"] for r in lines} == {"copy_match", "position", "random"}


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
