"""Judges: the rule judge's normalisation (documented in docs/sampling.md), FlashTrace's judge prompts and parse
rule, the model judge (a stand-in LM; slow: SmolLM2) and the openai judge against a local chat-completions server."""

import pytest

from ctxbench.core.errors import ConfigError
from ctxbench.generators import Generation
from ctxbench.models.spec import ModelConfig
from ctxbench.core.part import build
from ctxbench.sampling import (JUDGE_SYSTEM_PROMPT, Judge, JudgeItem, ModelJudge, OpenAIJudge, RuleJudge, Verdict,
                               judge_messages, normalize_answer, parse_judge_response)

from helpers.configs import compose_stage
from helpers.chat_server import KEY_ENV


def _compose(overrides):
    return compose_stage("sample", "paths.root=/tmp/ctxbench-root", *overrides)


@pytest.mark.parametrize("text, tokens", [
    ("The Eiffel Tower!", ["eiffel", "tower"]),
    ("  an   apple, a pear  ", ["apple", "pear"]),
    ("1,000", ["1000"]), ("1000.00", ["1000"]), ("3.0", ["3"]), ("0.50", ["0.5"]), ("-2.50", ["-2.5"]),
    ("−7", ["-7"]), ("1990-1995", ["1990", "1995"]), ("12,34", ["12", "34"]), ("$5%", ["5"]),
    ("O'Neil’s", ["oneils"]), ("ＰＡＲＩＳ　１２３", ["paris", "123"]), ("the 3rd", ["3rd"]), ("The", []),
])
def test_normalisation(text, tokens):
    assert normalize_answer(text) == tokens


@pytest.mark.parametrize("answer, reference, rule", [
    ("Paris", "paris", "exact"),
    ("The Paris.", "paris", "exact"),
    ("The capital of France is Paris.", "Paris", "contains"),
    ("It cost 1,000 dollars.", "1000", "contains"),
    ("3", "3.0", "exact"),
    ("He was 3.00 metres tall", "3 metres", "contains"),
    ("ＴＯＫＹＯ", "Tokyo", "exact"),
    ("Barack Obama was the president", "Barack Obama", "contains"),
    ("Obama", "Barack Obama", None),  # a part of the reference answer is not enough
    ("The answer is 30", "3", None),  # token-wise: 30 does not contain 3
    ("The answer is 1000", "100", None),
    ("Parisian food", "Paris", None),
    ("the", "the", None),  # nothing left after normalisation never matches
    ("", "x", None),
])
def test_rule_judge(answer, reference, rule):
    j = RuleJudge()
    assert j.match(answer, reference) == rule
    v = j.judge([JudgeItem(answer, reference)])[0]
    assert v == Verdict(rule is not None, f"True ({rule})" if rule else "False (no match)")


def test_rule_judge_switches():
    assert RuleJudge(containment=False).match("The capital is Paris", "Paris") is None
    assert RuleJudge(numbers=False).match("1,000", "1000") is None
    assert RuleJudge(rel_tol=1e-3).match("3.1416", "3.14159") == "exact"
    assert RuleJudge().match("3.1416", "3.14159") is None
    with pytest.raises(ValueError, match="rel_tol"):
        RuleJudge(rel_tol=2)


@pytest.mark.parametrize("reply, verdict", [
    ("True", True), ("  yes\nbecause", True), ("False", False), ("No", False), ("FALSE.", False),
    ("True.", True), ("I think it is true", True), ("true or false? false", False), ("maybe", False), ("", False),
    ("<think>hmm, false?</think>\nTrue", True),
])
def test_judge_reply_parse_rule(reply, verdict):
    assert parse_judge_response(reply) is verdict


def test_judge_prompts_are_the_specs():
    msgs = judge_messages("Paris", "It is Paris.")
    assert msgs[0] == {"role": "system", "content": "You verify whether the model's boxed answer matches the reference "
                                                    "answer. Reply strictly with True or False and nothing else."}
    assert msgs[1] == {"role": "user", "content": "Decide if the model's boxed answer matches the reference answer.\n"
                                                  "Reference answer: Paris\n"
                                                  "Model boxed answer (only the content inside \\box{}): It is Paris.\n"
                                                  "Output only True if they are semantically consistent; otherwise "
                                                  "output False."}
    assert JUDGE_SYSTEM_PROMPT == msgs[0]["content"]


class ScriptedGenerator:
    """Stands in for the model judge's HFGenerator: records the chats, replies from a list."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.seen = []

    def generate(self, requests):
        self.seen.extend(requests)
        return [Generation(r.key, error=rep[6:]) if rep.startswith("error:") else Generation(r.key, text=rep)
                for r, rep in zip(requests, self.replies)]


def test_model_judge_uses_the_spec_prompts_and_parse():
    j = ModelJudge()
    j._gen = ScriptedGenerator(["True", "no", "error:out of memory"])
    j._bound = True
    items = [JudgeItem("It is Paris.", "Paris"), JudgeItem("Lyon", "Paris"), JudgeItem("x", "y")]
    verdicts = j.judge(items)
    assert verdicts == [Verdict(True, "True"), Verdict(False, "no"), Verdict(False, "", error="out of memory")]
    assert [r.messages for r in j._gen.seen] == [judge_messages("Paris", "It is Paris."),
                                                 judge_messages("Paris", "Lyon"), judge_messages("y", "x")]
    assert ModelJudge().judge([]) == []
    with pytest.raises(RuntimeError, match="no model handed over"):
        ModelJudge().judge(items)
    with pytest.raises(ConfigError, match="judge: judge=model with judge.path=null"):
        ModelJudge().use_lm(None)  # an endpoint model: nothing local to judge with
    ModelJudge(path="some/model").use_lm(None)  # its own model: loaded on first use


def test_judge_options_from_yaml():
    assert isinstance(build(_compose([]).judge, "judge", Judge), RuleJudge)
    j = build(_compose(["judge=model"]).judge, "judge", Judge)
    assert isinstance(j, ModelJudge) and j.path is None and j.model_config() is None
    assert j.cache_dir == "/tmp/ctxbench-root/.cache"
    j = build(_compose(["judge=model", "judge.path=Qwen/Qwen3-8B", "judge.dtype=bfloat16"]).judge, "judge", Judge)
    cfg = j.model_config()
    assert isinstance(cfg, ModelConfig) and (cfg.path, cfg.dtype, cfg.backend) == ("Qwen/Qwen3-8B", "bfloat16", "hf")
    with pytest.raises(Exception, match="pth"):
        _compose(["judge=model", "judge.pth=x"])
    with pytest.raises(ConfigError, match="judge: max_new_tokens=0"):
        build(_compose(["judge=model", "judge.max_new_tokens=0"]).judge, "judge")
    with pytest.raises(Exception, match="contaiment"):
        _compose(["judge.contaiment=false"])
    assert build(_compose(["judge.containment=false"]).judge, "judge").containment is False


def test_openai_judge_against_a_local_server(server, tmp_path):  # noqa: F811
    cfg = _compose(["judge=openai", f"judge.base_url={server.base_url}", "judge.model_name=judge-m",
                    f"judge.api_key_env={KEY_ENV}", f"paths.model_cache_dir={tmp_path}"])
    j = build(cfg.judge, "judge", Judge)
    assert isinstance(j, OpenAIJudge)
    verdicts = j.judge([JudgeItem("The city is Paris.", "Paris"), JudgeItem("Lyon", "Paris")])
    assert verdicts == [Verdict(True, "True"), Verdict(False, "False")]
    body = server.bodies[0]
    assert body["model"] == "judge-m" and body["max_tokens"] == 16 and body["temperature"] == 0.0
    assert sorted(b["messages"][1]["content"] for b in server.bodies) == sorted(
        judge_messages("Paris", a)[1]["content"] for a in ("The city is Paris.", "Lyon"))
    assert body["messages"][0] == judge_messages("Paris", "x")[0]
    j.judge([JudgeItem("The city is Paris.", "Paris")])  # cached: the server is not asked again
    assert len(server.bodies) == 2
    bad = OpenAIJudge(base_url=server.base_url.replace("/v1", "/nope"), model_name="m", api_key_env=KEY_ENV,
                      max_retries=0)
    v = bad.judge([JudgeItem("a", "a")])[0]
    assert v.correct is False and v.error.startswith("HTTP 404")


@pytest.mark.slow
def test_model_judge_on_smollm2(smollm2):
    j = ModelJudge(max_new_tokens=4)
    j.use_lm(smollm2)
    verdicts = j.judge([JudgeItem("The capital of France is Paris.", "Paris"), JudgeItem("Berlin", "Paris")])
    assert len(verdicts) == 2 and all(v.error is None and isinstance(v.correct, bool) for v in verdicts)
    assert all(v.correct is parse_judge_response(v.response) for v in verdicts)
