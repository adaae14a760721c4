"""Adding a part touches only the files docs/usage.md#adding-a-part names: one part of each kind
(tests/helpers/scratch_parts.py: an attribution method, a mode, a dataset kind, a retriever, a model family) is copied
into a scratch folder outside the project, with its YAML options in a search-path folder of their own, and each runs
through the stage that reads it: nothing else of the project is changed or told about them."""

import json
import shutil

import numpy as np
import pytest

from helpers.configs import compose_stage, plugin_option, tmp_paths
from helpers.paths import ROOT
from helpers.retrieval import tiny_beir_folder

LINES = [{"id": "a", "context": "The key is in the box. The box is red.", "answer": "The key is in the box."},
         {"id": "b", "context": "Rome is in Italy. Paris is in France.", "answer": "Paris is in France."}]


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """The scratch module on the import path and its options' search path (what a user's own folder would be)."""
    plug = tmp_path / "plug"
    plug.mkdir()
    shutil.copy(ROOT / "tests" / "helpers" / "scratch_parts.py", plug / "scratch_parts.py")
    monkeypatch.syspath_prepend(str(plug))
    search = plugin_option(tmp_path, "attribution", "first_tokens",
                           "first_tokens:\n  _target_: scratch_parts.FirstTokensAttributor\n  n: 2\n")
    plugin_option(tmp_path, "mode", "top_share", "top_share:\n  _target_: scratch_parts.TopShareScorer\n  k: 3\n")
    plugin_option(tmp_path, "dataset", "lines", "_target_: scratch_parts.LinesDataset\nname: lines\npath: ???\n")
    plugin_option(tmp_path, "retriever", "longest_word",
                  "_target_: scratch_parts.LongestWordRetriever\nice_num: 1\nfields: [text]\n")
    return search


def test_a_method_a_mode_and_a_dataset_from_outside_run_through_run_exp(tmp_path, scratch):
    from ctxbench.stages.run import run_stage

    data = tmp_path / "lines.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in LINES))
    cfg = compose_stage("run", scratch, *tmp_paths(tmp_path), "dataset=lines", f"dataset.path={data}",
                        "attribution=[first_tokens,position]", "mode=[top_share]", "views=[seq]", "progress=false",
                        "heatmaps=0", "html=false")
    summary = run_stage(cfg, tmp_path / "job")
    records = [json.loads(line) for line in (tmp_path / "job" / "results.jsonl").read_text().splitlines()]
    assert {(r["example_id"], r["method"]) for r in records} == {(i, m) for i in "ab" for m in
                                                                ("first_tokens", "position")}
    for r in records:
        # by hand: the first 2 of P tokens scored 1 hold all of the weight; (p + 1) / P puts
        # (P + (P - 1) + (P - 2)) / (P (P + 1) / 2) on its top 3
        P = r["P"]
        want = 1.0 if r["method"] == "first_tokens" else (3 * P - 3) / (P * (P + 1) / 2)
        assert r["top_share"]["seq"] == pytest.approx(want, rel=1e-6)
    assert summary["first_tokens"]["top_share"]["seq"]["share"]["n"] == 2
    assert "## Top share (higher is better)" in (tmp_path / "job" / "summary.md").read_text()


def test_a_retriever_from_outside_runs_through_mode_retrieval(tmp_path, scratch):
    from ctxbench.stages.run import run_stage

    data = tiny_beir_folder(tmp_path)
    cfg = compose_stage("run", scratch, *tmp_paths(tmp_path), "mode=retrieval", "dataset=beir",
                        f"dataset.path={data}", "retriever=longest_word", "mode.retrieval.k_values=[1]",
                        "mode.retrieval.eval_metrics=[recall_at_1]", "progress=false")
    out = run_stage(cfg, tmp_path / "job")
    (entry,) = out["results"]
    assert entry["model"] == "longest_word" and 0.0 <= entry["metrics"]["recall_at_1"] <= 1.0


def test_a_model_family_is_one_module_and_one_entry_of_families(scratch, monkeypatch):
    """A new family read by adding it to ``FAMILIES`` only: the refusal names it, the tiny-model helper builds its
    member, and its adapter (Mistral read as its own family) gives the IFR of the Llama-like adapter it refines."""
    import scratch_parts

    from ctxbench.attribution import capture, per_token_ifr
    from ctxbench.attribution import families
    from ctxbench.attribution.ifr import IFRConfig

    from helpers.tiny_models import make_input, tiny_model

    assert "mistral" not in families.tiny_configs(64)
    monkeypatch.setattr(families, "FAMILIES", (scratch_parts.MistralAdapter, *families.FAMILIES))
    assert "Mistral (scratch)" in families.family_names() and "mistral" in families.tiny_configs(64)
    model = tiny_model("mistral")
    assert type(families.adapter_for(model)) is scratch_parts.MistralAdapter
    mi = make_input()
    sinks = list(range(mi.gen_start, mi.input_ids.numel()))
    mine = per_token_ifr(capture(model, mi.input_ids, mi.gen_start), sinks, IFRConfig()).numpy()
    monkeypatch.setattr(families, "FAMILIES", tuple(f for f in families.FAMILIES
                                                    if f is not scratch_parts.MistralAdapter))
    assert type(families.adapter_for(model)) is families.LlamaLikeAdapter
    np.testing.assert_array_equal(per_token_ifr(capture(model, mi.input_ids, mi.gen_start), sinks,
                                                IFRConfig()).numpy(), mine)
