"""ICL templates: every worked example of OpenCompass's openicl templates and of AISBench, with the retrievers
that pick the examples; dialogue templates as chat messages (SmolLM2's chat template) and as text; unknown
placeholders; refusals."""

from __future__ import annotations

import pytest

from ctxbench.prompts.icl import (BOX_SYSTEM_PROMPT, ICLTemplate, Segment, box_template, chat_supports_system, fill)
from ctxbench.retrievers.fixk import FixKRetriever
from ctxbench.retrievers.pool import load_pool
from ctxbench.retrievers.random import RandomRetriever
from ctxbench.retrievers.zero import ZeroRetriever

TRAIN = [{"id": "t0", "question": "tq0", "answer": "ta0"}, {"id": "t1", "question": "tq1", "answer": "ta1"}]
TEST = [{"id": "s0", "question": "Q0", "answer": "A0"}]


def _prompts(template: ICLTemplate, retriever, train=TRAIN, test=TEST) -> list[str]:
    retriever.fit(train)
    return [template.render(row, [train[i] for i in h.indices]).text
            for row, h in zip(test, retriever.retrieve(test))]


# --- OpenCompass openicl worked examples ------------------------------------------------------------------------

def test_spec_worked_example_fixk_string_templates():
    t = ICLTemplate(ice_template="{question}\n{answer}",
                    prompt_template="Solve the following questions.\n</E>{question}\n{answer}", ice_token="</E>")
    expect = "Solve the following questions.\ntq0\nta0\ntq1\nta1\nQ0\n"
    assert _prompts(t, FixKRetriever(fix_id_list=[0, 1])) == [expect]


def test_spec_worked_example_abbreviated_form():
    t = ICLTemplate(ice_template="</E>Q: {question}\nA: {answer}", ice_token="</E>")
    assert _prompts(t, FixKRetriever(fix_id_list=[0, 1])) == ["Q: tq0\nA: ta0\nQ: tq1\nA: ta1\nQ: Q0\nA: "]


def test_zero_retriever_renders_an_empty_block():
    t = ICLTemplate(ice_template="{question}\n{answer}",
                    prompt_template="Solve the following questions.\n</E>{question}\n{answer}", ice_token="</E>")
    assert _prompts(t, ZeroRetriever()) == ["Solve the following questions.\nQ0\n"]
    # a prompt template alone serves zero-shot
    assert ICLTemplate(prompt_template="Q: {question}\nA: {answer}").render(TEST[0]).text == "Q: Q0\nA: "


def test_separator_and_eos_of_string_examples():
    t = ICLTemplate(ice_template="{question}={answer}", prompt_template="</E>{question}=", ice_token="</E>",
                    ice_separator=" | ", ice_eos_token=" || ")
    assert t.render(TEST[0], TRAIN).text == "tq0=ta0 | tq1=ta1 || Q0="


# --- AISBench's examples ---------------------------------------------------------------------------------------

RACE_TRAIN = [{"id": f"r{i}", "article": f"Article {c}...", "question": f"Question {i + 1}",
               "A": "a", "B": "b", "C": "c", "D": "d", "answer": ans}
              for i, (c, ans) in enumerate(zip("ABCDE", "ABCDA"))]
RACE_TEST = [{"id": "x0", "article": "Article X...", "question": "Test question 1", "A": "a", "B": "b", "C": "c",
              "D": "d", "answer": "B"}]
RACE_HUMAN = ("Read the article, and answer the question by replying A, B, C or D.\n\nArticle:\n{article}\n\nQ: "
              "{question}\n\nA. {A}\nB. {B}\nC. {C}\nD. {D}\nAnswer:")


def test_seed_race_five_shot_dialogue():
    t = ICLTemplate(ice_template={"begin": "</E>", "round": [{"role": "HUMAN", "prompt": RACE_HUMAN},
                                                             {"role": "BOT", "prompt": "{answer}"}]},
                    ice_token="</E>")
    r = FixKRetriever(fix_id_list=[0, 1, 2, 3, 4]).fit(RACE_TRAIN)
    hits = r.retrieve(RACE_TEST + [{**RACE_TEST[0], "id": "x1"}])
    assert hits[0].indices == hits[1].indices == [0, 1, 2, 3, 4]
    rendered = t.render(RACE_TEST[0], [RACE_TRAIN[i] for i in hits[0].indices])
    msgs, open_turn = rendered.messages()
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 5 + ["user"] and not open_turn
    assert msgs[0]["content"].startswith("Read the article") and "Article A..." in msgs[0]["content"]
    assert [m["content"] for m in msgs[1:10:2]] == ["A", "B", "C", "D", "A"]
    assert msgs[-1]["content"].endswith("Q: Test question 1\n\nA. a\nB. b\nC. c\nD. d\nAnswer:")
    text = rendered.text  # a model without a chat template: the turns joined by newlines, no leading newline
    assert text.startswith("Read the article") and text.endswith("D. d\nAnswer:")
    assert text.count("Answer:\n") == 5  # each example's answer on the line after its "Answer:"


def test_seed_random_retriever_label_example():
    train = [{"id": str(i), "text": t, "label": lab} for i, (t, lab) in enumerate(
        [("这是一篇关于科技的文章", "科技"), ("这是一篇关于体育的文章", "体育"), ("这是一篇关于娱乐的文章", "娱乐"),
         ("这是一篇关于财经的文章", "财经"), ("这是一篇关于教育的文章", "教育"), ("这是一篇关于健康的文章", "健康")])]
    test = [{"id": "test-0", "text": "这是一篇关于AI的文章", "label": "科技"}]
    t = ICLTemplate(ice_template={"begin": "</E>", "round": [{"role": "HUMAN", "prompt": "Text: {text}"},
                                                             {"role": "BOT", "prompt": "Label: {label}"}]},
                    ice_token="</E>", answer_field="label")
    r = RandomRetriever(ice_num=3, seed=123).fit(train)
    idx = r.retrieve(test)[0].indices
    assert len(set(idx)) == 3 and r.retrieve(test)[0].indices == idx  # same seed, same examples
    rendered = t.render(test[0], [train[i] for i in idx])
    lines = [f"Text: {train[i]['text']}\nLabel: {train[i]['label']}" for i in idx]
    assert rendered.text == "\n".join(lines) + "\nText: 这是一篇关于AI的文章\nLabel: "
    msgs, open_turn = rendered.messages()
    assert open_turn and msgs[-1] == {"role": "assistant", "content": "Label: "}  # the answer turn left open


def test_zero_shot_dialogue_has_no_leading_newline():
    t = ICLTemplate(ice_template={"begin": "</E>", "round": [{"role": "HUMAN", "prompt": "Q: {question}"},
                                                             {"role": "BOT", "prompt": "{answer}"}]},
                    ice_token="</E>")
    r = t.render(TEST[0], [])
    assert r.text == "Q: Q0" and r.messages() == ([{"role": "user", "content": "Q: Q0"}], False)


# --- placeholders and refusals ---------------------------------------------------------------------------------

def test_unknown_placeholders_are_left_alone():
    t = ICLTemplate(prompt_template="{question} {unknown} {} {0} {{question}} {answer:>3}")
    assert t.render(TEST[0]).text == "Q0 {unknown} {} {0} {Q0} {answer:>3}"
    assert fill("{a}{b}", {"a": None, "b": 3}) == "3"


def test_placeholders_are_filled_once():
    t = ICLTemplate(ice_template="{question}: {answer}", prompt_template="</E>{question}: {answer}",
                    ice_token="</E>")
    train = [{"question": "what is {answer}?", "answer": "{question}"}]
    test = {"question": "literal {answer}", "answer": "gold"}
    assert t.render(test, train).text == "what is {answer}?: {question}\nliteral {answer}: "


@pytest.mark.parametrize("kwargs, match", [
    (dict(), "give at least one"),
    (dict(ice_template="{question}\n{answer}"), "must contain the ice_token"),
    (dict(ice_template="{q}", prompt_template="no token here", ice_token="</E>"), "prompt_template must contain"),
    (dict(ice_template={"round": [{"role": "HUMAN", "prompt": "{q}"}]}, prompt_template="</E>{q}", ice_token="</E>"),
     "dialogue ice_template needs a dialogue prompt_template"),
    (dict(ice_template={"round": [{"role": "HUMAN", "prompt": "{q}"}]},
          prompt_template={"round": [{"role": "HUMAN", "prompt": "</E>{q}"}]}, ice_token="</E>"), "inside a turn"),
    (dict(prompt_template={"A": "x", "B": "y"}), "label-keyed"),
    (dict(prompt_template={"round": [{"role": "USER", "prompt": "x"}]}), "role='USER'"),
    (dict(prompt_template={"round": []}), "non-empty round"),
    (dict(prompt_template="x", ice_token=""), "ice_token"),
])
def test_bad_templates_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ICLTemplate(**kwargs)


def test_examples_without_an_ice_template_are_refused():
    with pytest.raises(ValueError, match="no ice_template"):
        ICLTemplate(prompt_template="{question}").render(TEST[0], TRAIN)


def test_string_ice_inside_a_dialogue_turn():
    t = ICLTemplate(ice_template="{question} -> {answer}",
                    prompt_template={"round": [{"role": "HUMAN", "prompt": "Examples:\n</E>Now: {question}"},
                                               {"role": "BOT", "prompt": "{answer}"}]}, ice_token="</E>")
    msgs, open_turn = t.render(TEST[0], TRAIN).messages()
    assert msgs == [{"role": "user", "content": "Examples:\ntq0 -> ta0\ntq1 -> ta1\nNow: Q0"}] and not open_turn


# --- chat rendering --------------------------------------------------------------------------------------------

def test_system_turn_and_its_fallback():
    t = ICLTemplate(prompt_template={"begin": [{"role": "SYSTEM", "fallback_role": "HUMAN", "prompt": "Be brief."},
                                               "</E>"],
                                     "round": [{"role": "HUMAN", "prompt": "{question}"},
                                               {"role": "BOT", "prompt": "{answer}"}]},
                    ice_template={"round": [{"role": "HUMAN", "prompt": "{question}"},
                                            {"role": "BOT", "prompt": "{answer}"}]}, ice_token="</E>")
    r = t.render(TEST[0], TRAIN[:1])
    assert r.messages()[0] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "tq0"},
                               {"role": "assistant", "content": "ta0"}, {"role": "user", "content": "Q0"}]
    assert r.messages(system_role=False)[0][0] == {"role": "user", "content": "Be brief.\ntq0"}
    assert r.text == "Be brief.\ntq0\nta0\nQ0"
    assert r.segments[0] == Segment("SYSTEM", "Be brief.", "HUMAN")


class NoSystemTokenizer:
    """A chat template that refuses the system role (as some do)."""

    chat_template = "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}{% endif %}" \
                    "[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False, continue_final_message=False,
                            **kw):
        if any(m["role"] == "system" for m in messages):
            raise ValueError("System role not supported")
        out = "".join(f"[{m['role']}]{m['content']}" for m in messages)
        return out + ("[assistant]" if add_generation_prompt else "")


def test_chat_model_without_system_role_gets_the_fallback():
    tok = NoSystemTokenizer()
    assert not chat_supports_system(tok)
    mp = box_template().for_model({"id": "q", "prompt": "P?"}, [{"prompt": "p0", "response": "r0 \\box{s0}"}], tok)
    assert mp.messages[0]["role"] == "user" and mp.messages[0]["content"].startswith(BOX_SYSTEM_PROMPT)
    assert mp.text.endswith("[user]P?[assistant]") and mp.add_generation_prompt


@pytest.mark.slow
def test_chat_messages_with_smollm2_template(smol_tokenizer):
    assert chat_supports_system(smol_tokenizer)
    pool = load_pool()
    t = box_template()
    ex = [pool[0], pool[5]]
    mp = t.for_model({"id": "q", "prompt": "Ctx.\nWhat?"}, ex, smol_tokenizer)
    assert [m["role"] for m in mp.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert mp.messages[0]["content"] == BOX_SYSTEM_PROMPT
    assert mp.messages[1]["content"] == pool[0]["prompt"] and mp.messages[2]["content"] == pool[0]["response"]
    assert mp.messages[2]["content"].endswith("\\box{" + pool[0]["answer_sentence"] + "}")
    assert mp.text == smol_tokenizer.apply_chat_template(mp.messages, tokenize=False, add_generation_prompt=True)
    assert mp.text.startswith("<|im_start|>system\n" + BOX_SYSTEM_PROMPT) and mp.text.endswith(
        "<|im_start|>user\nCtx.\nWhat?<|im_end|>\n<|im_start|>assistant\n")
    # an open answer turn with a prefix is continued, not closed
    t2 = ICLTemplate(prompt_template={"round": [{"role": "HUMAN", "prompt": "Text: {text}"},
                                                {"role": "BOT", "prompt": "Label: {label}"}]}, answer_field="label")
    mp2 = t2.for_model({"text": "AI"}, [], smol_tokenizer)
    assert mp2.continue_final_message and mp2.text.endswith("<|im_start|>assistant\nLabel: ")
    # no chat template: the plain text
    assert t.for_model({"id": "q", "prompt": "Ctx.\nWhat?"}, ex, None).messages is None
