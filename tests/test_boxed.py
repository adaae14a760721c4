"""The format check split_boxed_generation: balanced braces, FlashTrace's rejection rules, which box wins."""

import pytest

from ctxbench.boxed import (EMPTY_BOX, EMPTY_GENERATION, EMPTY_THINKING, NO_BOX, REJECTION_REASONS,
                                     TEXT_AFTER_BOX, UNBALANCED_BRACES, BoxedSplit, Rejection, split_boxed_generation)


def accepted(text):
    res = split_boxed_generation(text)
    assert isinstance(res, BoxedSplit) and res.ok, res
    return res


def refused(text):
    res = split_boxed_generation(text)
    assert isinstance(res, Rejection) and not res.ok, res
    assert res.reason in REJECTION_REASONS
    return res.reason


def test_plain_box_and_boxed():
    r = accepted("Paris is in France.\nSo \\box{The capital is Paris.}")
    assert (r.thinking, r.answer) == ("Paris is in France.\nSo", "The capital is Paris.")
    r = accepted("  think  \\boxed  {  42 }\n\n ")
    assert (r.thinking, r.answer) == ("think", "42")
    text = "a \\box{b}"
    r = accepted(text)
    assert text[r.box_start:r.box_end] == "\\box{b}"


def test_nested_braces_are_balanced():
    # FlashTrace's non-greedy regex would stop at the first closing brace
    r = accepted("We compute. \\box{the set {1, {2}} has \\frac{1}{2} of them}")
    assert r.answer == "the set {1, {2}} has \\frac{1}{2} of them"
    r = accepted("x \\boxed{\\boxed{inner} outer}")  # a box inside the box is part of the answer
    assert r.answer == "\\boxed{inner} outer"
    r = accepted("x \\box{a \\} b}")  # an escaped brace is a literal character
    assert r.answer == "a \\} b"


def test_full_width_braces():
    assert accepted("思考。\\box｛答案是北京｝").answer == "答案是北京"
    assert accepted("mixed \\box{a｝").answer == "a"
    assert accepted("nested \\box｛a {b} c｝").answer == "a {b} c"


def test_text_after_the_box_is_refused():
    assert refused("think \\box{a} and more") == TEXT_AFTER_BOX
    assert refused("think \\box{a}}") == TEXT_AFTER_BOX  # a stray closing brace
    assert refused("think \\box{a}.") == TEXT_AFTER_BOX


def test_two_boxes_the_last_wins_and_must_end_the_text():
    r = accepted("first \\box{a} then \\box{b}")
    assert (r.thinking, r.answer) == ("first \\box{a} then", "b")  # the earlier box stays in the thinking
    assert refused("first \\box{a} then \\box{b} tail") == TEXT_AFTER_BOX
    r = accepted("\\box{a}\\box{b}")  # the first box is the (non-empty) thinking
    assert (r.thinking, r.answer) == ("\\box{a}", "b")


def test_rejections():
    assert refused("") == EMPTY_GENERATION
    assert refused(None) == EMPTY_GENERATION
    assert refused(" \n ") == EMPTY_GENERATION
    assert refused("no box here, {just} braces") == NO_BOX
    assert refused("\\boxtimes{a}") == NO_BOX
    assert refused("think \\box{}") == EMPTY_BOX
    assert refused("think \\box{  \n }") == EMPTY_BOX
    assert refused("\\box{answer}") == EMPTY_THINKING
    assert refused("  \n\\boxed{answer}  ") == EMPTY_THINKING
    assert refused("think \\box{a {b}") == UNBALANCED_BRACES
    assert refused("think \\box{a} then \\box{b") == UNBALANCED_BRACES


@pytest.mark.parametrize("reason", REJECTION_REASONS)
def test_reasons_are_short_stable_strings(reason):
    assert reason.isidentifier() and reason.islower()
