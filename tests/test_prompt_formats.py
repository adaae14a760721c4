"""The model input of run_exp: prompt positions and offsets in both prompt formats."""

import pytest

from ctxbench.prompts.formats import build_model_input


PROMPT = "Alpha beta. The key is 42.\nWhat is the key?"


@pytest.mark.parametrize("fmt", ["table1", "bare"])
def test_prompt_tokens_cover_the_prompt(smol_tokenizer, fmt):
    tok = smol_tokenizer
    mi = build_model_input(tok, PROMPT, " Answer: 42", fmt)
    ids = mi.input_ids.tolist()
    # Decoding the prompt positions gives the prompt back (a leading space may belong to the first token).
    assert tok.decode([ids[p] for p in mi.prompt_positions]).strip() == PROMPT
    assert mi.prompt_positions.tolist() == list(range(int(mi.prompt_positions[0]), int(mi.prompt_positions[-1]) + 1))
    # Offsets index the prompt string itself and tile it.
    assert mi.prompt_offsets[0][0] == 0 and mi.prompt_offsets[-1][1] == len(PROMPT)
    for (a, b), (c, d) in zip(mi.prompt_offsets, mi.prompt_offsets[1:]):
        assert b == c and a < b
    # Generated tokens: the target's own tokens, then EOS.
    gen = tok(" Answer: 42", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert ids[mi.gen_start:] == gen and mi.G == len(gen)
    if fmt == "table1":
        assert "Context: " + PROMPT + "\n\n\nQuery: <|im_end|>" in mi.text
        assert mi.text.endswith("<|im_start|>assistant\n")
        assert int(mi.prompt_positions[0]) > 0 and int(mi.prompt_positions[-1]) < mi.gen_start - 1
    else:
        assert mi.text == PROMPT


def test_unknown_format(smol_tokenizer):
    with pytest.raises(ValueError, match="prompt_format"):
        build_model_input(smol_tokenizer, PROMPT, "x", "chatml")


def test_table1_without_a_chat_template_is_the_message_as_plain_text(smol_tokenizer):
    """A base model's tokenizer (Gemma 3 270M has no chat template): the Table-1 message, after the tokenizer's own
    special tokens, the prompt tokens inside it."""
    import copy

    tok = copy.deepcopy(smol_tokenizer)
    tok.chat_template = None
    mi = build_model_input(tok, PROMPT, " Answer: 42", "table1")
    assert mi.text == "Context: " + PROMPT + "\n\n\nQuery: "
    ids = mi.input_ids.tolist()
    plain = tok(mi.text)["input_ids"]  # with the special tokens the tokenizer adds itself
    assert ids[:mi.gen_start] == plain
    assert tok.decode([ids[p] for p in mi.prompt_positions]).strip() == PROMPT
    assert mi.prompt_offsets[0][0] == 0 and mi.prompt_offsets[-1][1] == len(PROMPT)
