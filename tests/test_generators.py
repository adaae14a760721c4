"""Generators: the OpenAI-compatible client against a real local HTTP server speaking chat completions (429, 5xx,
timeouts, bad JSON, the response cache, the concurrency limit), replay on a hand-written file, the hf generator's
batching (left padding, EOS stop, failures isolated) and, slow, on SmolLM2."""

import json
import time

import pytest
import torch

from ctxbench.core.errors import ConfigError, DataError
from ctxbench.generators import GenerationRequest, Generator
from ctxbench.generators.hf import HFGenerator, render_chat
from ctxbench.generators.openai import OpenAIGenerator
from ctxbench.generators.replay import ReplayGenerator
from ctxbench.models.openai_client import ChatClient, ChatError
from ctxbench.core.part import build
from ctxbench.boxed import split_boxed_generation
from ctxbench.utils.tokens import eos_ids

from helpers.chat_server import KEY, KEY_ENV
from helpers.configs import compose_stage
from helpers.records import write_jsonl

def client(server, **kw):
    args = dict(api_key_env=KEY_ENV, timeout_s=5.0, max_retries=3, backoff_s=0.01, max_backoff_s=0.05)
    args.update(kw)
    return ChatClient(server.base_url, "m", **args)


def user(text):
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]


def test_reply_and_request_body(server):
    res = client(server).complete(user("echo:hello"), max_tokens=5, temperature=0.0, seed=None)
    assert (res.text, res.finish_reason, res.prompt_tokens, res.completion_tokens) == ("hello", "stop", 7, 3)
    body = server.bodies[-1]
    assert body == {"model": "m", "messages": user("echo:hello"), "max_tokens": 5, "temperature": 0.0}


def test_retries_on_429_and_5xx_then_succeeds(server):
    c = client(server)
    res = c.complete(user("429x2:ok after 429"))
    assert res.text == "ok after 429" and res.attempts == 3 and server.hits["429x2:ok after 429"] == 3
    res = c.complete(user("503x1:ok after 503"))
    assert res.text == "ok after 503" and res.attempts == 2
    res = c.complete(user("badjson1"))  # an unreadable reply is retried too
    assert res.text == "fine now" and res.attempts == 2


def test_waits_between_retries_follow_backoff_and_retry_after(server):
    """The SDK retries; the waits between tries are the endpoint's (the SDK's own start at 0.5 s and double):
    ``backoff_s * 2**k`` plus up to 25 % jitter, at least a 429's ``Retry-After``, at most ``max_backoff_s``."""
    t0 = time.perf_counter()
    assert client(server, backoff_s=0.0).complete(user("429x3:no wait")).attempts == 4
    assert time.perf_counter() - t0 < 1.5  # the SDK's waits would be 2.6 s at least
    t0 = time.perf_counter()
    assert client(server, backoff_s=0.2, max_backoff_s=0.25).complete(user("503x3:capped")).attempts == 4
    assert 0.6 <= time.perf_counter() - t0 < 1.3  # 0.2-0.25, then 0.25 twice (uncapped: 1.4 s at least)
    t0 = time.perf_counter()
    assert client(server, backoff_s=0.0, max_backoff_s=5).complete(user("after0.5:told to wait")).attempts == 2
    assert time.perf_counter() - t0 >= 0.5
    t0 = time.perf_counter()
    assert client(server, backoff_s=0.0, max_backoff_s=0.05).complete(user("after30:not that long")).attempts == 2
    assert time.perf_counter() - t0 < 1.5


def test_gives_up_with_a_one_line_error(server):
    c = client(server, max_retries=2)
    with pytest.raises(ChatError, match=r"gave up after 3 attempts: HTTP 500: server says no") as exc:
        c.complete(user("always500"))
    assert exc.value.status == 500 and server.hits["always500"] == 3
    with pytest.raises(ChatError, match="unreadable reply"):
        c.complete(user("badjson"))
    # other 4xx are not retried
    with pytest.raises(ChatError, match="HTTP 400: try again") as exc:
        c.complete(user("400x5:never"))
    assert exc.value.status == 400 and server.hits["400x5:never"] == 1


def test_timeouts_are_retried(server):
    c = client(server, timeout_s=0.3, max_retries=1)
    t0 = time.perf_counter()
    res = c.complete(user("slowonce1.0:late but fine"))
    assert res.text == "late but fine" and res.attempts == 2
    with pytest.raises(ChatError, match="timed out"):
        c.complete(user("slow1.0:never in time"))
    assert time.perf_counter() - t0 < 5


def test_key_from_the_environment_only(server, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, "wrong")
    with pytest.raises(ChatError, match="HTTP 401"):
        client(server).complete(user("echo:x"))
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ChatError, match=f"{KEY_ENV} is not set"):
        client(server).complete(user("echo:x"))
    with pytest.raises(ValueError, match=f"^api_key_env='{KEY_ENV}': the environment variable is not set"):
        OpenAIGenerator(base_url=server.base_url, model_name="m", api_key_env=KEY_ENV)
    # api_key_env=null sends no key at all, not even the SDK's default variable
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(ChatError, match="HTTP 401: bad key"):
        client(server, api_key_env=None).complete(user("echo:x"))
    assert server.auth[-1] is None and server.auth[0] == "Bearer wrong"


def test_response_cache(server, tmp_path):
    c = client(server, cache_dir=tmp_path / "cache")
    first = c.complete(user("echo:cached"), temperature=0.0)
    again = c.complete(user("echo:cached"), temperature=0.0)
    assert (first.cached, again.cached, again.text) == (False, True, "cached") and server.hits["echo:cached"] == 1
    c.complete(user("echo:cached"), temperature=0.5)  # another request: another entry
    assert server.hits["echo:cached"] == 2
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 2 and all(KEY not in f.read_text() for f in files)
    with pytest.raises(ChatError):  # failures are not cached
        c.complete(user("always503"))
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 2


def test_concurrency_limit_and_failures_isolated(server):
    c = client(server, concurrency=3, max_retries=0)
    chats = [user(f"slow0.2:r{i}") for i in range(9)] + [user("always500")]
    t0 = time.perf_counter()
    out = c.complete_many(chats)
    assert [r.text for r in out[:9]] == [f"r{i}" for i in range(9)] and isinstance(out[9], ChatError)
    assert server.max_in_flight == 3 and time.perf_counter() - t0 < 3


def test_reasoning_content_goes_before_the_answer(server):
    assert client(server).complete(user("think")).text == "2 + 2 is 4.\n\\box{4}"
    assert client(server, prepend_reasoning=False).complete(user("think")).text == "\\box{4}"


def _compose(overrides):
    return compose_stage("sample", "paths.root=/tmp/ctxbench-root", *overrides)


def test_openai_generator_from_its_yaml(server, tmp_path):
    cfg = _compose(["generator=openai", f"generator.base_url={server.base_url}", "generator.model_name=m",
                    f"generator.api_key_env={KEY_ENV}", "generator.backoff_s=0.01", "generator.max_retries=1",
                    f"paths.model_cache_dir={tmp_path}"])
    gen = build(cfg.generator, "generator", Generator)
    assert isinstance(gen, OpenAIGenerator) and gen.cache_dir == f"{tmp_path}/openai_responses"
    reqs = [GenerationRequest("a", user("echo:A")), GenerationRequest("b", user("always502")),
            GenerationRequest("c", user("echo:C"))]
    out = gen.generate(reqs)
    assert [g.key for g in out] == ["a", "b", "c"] and [g.text for g in out] == ["A", "", "C"]
    assert out[1].error.startswith("gave up after 2 attempts: HTTP 502") and out[0].ok and not out[1].ok
    assert server.bodies[0]["max_tokens"] == 1024 and "seed" not in server.bodies[0]
    assert "sk-" not in json.dumps(gen.settings())
    with pytest.raises(ConfigError, match="generator: .*timeout_s=0"):
        build(_compose(["generator=openai", "generator.timeout_s=0", f"generator.api_key_env={KEY_ENV}"]).generator,
              "generator")


# --- replay ---------------------------------------------------------------------------------------------------------

def test_replay_matches_by_id_then_prompt(tmp_path):
    f = write_jsonl(tmp_path / "r.jsonl", [
        {"id": "q1", "response": "think \\box{A}", "finish_reason": "stop", "extra": 1},
        {"id": 7, "response": "seven"},
        {"prompt": "What is two plus two?", "response": "2+2 \\box{4}"},
        {"prompt": "<|im_start|>user\nrendered<|im_end|>\n", "response": "from the rendered text"},
        {"messages": user("by messages"), "response": "matched the chat"},
        "",
    ])
    gen = ReplayGenerator(path=str(f))
    reqs = [GenerationRequest("q1", user("anything")), GenerationRequest("7", user("x")),
            GenerationRequest("q3", user("What is two plus two?")),
            GenerationRequest("q4", user("other"), text="<|im_start|>user\nrendered<|im_end|>\n"),
            GenerationRequest("q5", user("by messages")), GenerationRequest("q6", user("unknown"))]
    out = gen.generate(reqs)
    assert [g.text for g in out[:5]] == ["think \\box{A}", "seven", "2+2 \\box{4}", "from the rendered text",
                                         "matched the chat"]
    assert out[0].finish_reason == "stop" and out[1].finish_reason == "replay"
    assert out[5].error.startswith("replay: no response") and "'q6'" in out[5].error and out[5].text == ""


@pytest.mark.parametrize("lines, match", [
    ([{"id": "a", "response": "x"}, {"id": "a", "response": "y"}], r"r.jsonl:2: field 'id': id 'a' appears twice"),
    ([{"id": "a"}], r"r.jsonl:1: field 'response': missing"),
    ([{"id": "a", "response": 3}], r"r.jsonl:1: field 'response'"),
    ([{"response": "x"}], r"r.jsonl:1: field 'id': a line needs"),
    ([{"prompt": "p", "response": "x"}, {"prompt": "p", "response": "y"}], r"r.jsonl:2: field 'prompt'"),
    (['{"id": "a", "response": "x"}', "{oops"], r"r.jsonl:2: not a JSON object"),
])
def test_replay_bad_files(tmp_path, lines, match):
    f = write_jsonl(tmp_path / "r.jsonl", lines)
    with pytest.raises(DataError, match=match):
        ReplayGenerator(path=str(f))


def test_replay_from_its_yaml(tmp_path):
    f = write_jsonl(tmp_path / "r.jsonl", [{"id": "1", "response": "r"}])
    gen = build(_compose(["generator=replay", f"generator.path={f}"]).generator, "generator", Generator)
    assert gen.generate([GenerationRequest("1")])[0].text == "r"
    with pytest.raises(ConfigError, match="generator: path=None: generator=replay needs"):
        build(_compose(["generator=replay"]).generator, "generator")
    with pytest.raises(ConfigError, match="no such file"):
        build(_compose(["generator=replay", f"generator.path={tmp_path / 'missing.jsonl'}"]).generator, "generator")


# --- hf ---------------------------------------------------------------------------------------------------------------

class FakeLM:
    """A stand-in for LoadedLM: ``generate`` records its inputs and appends scripted tokens per prompt length."""

    def __init__(self, tokenizer, script, fail_width=None):
        self.tokenizer = tokenizer
        self.device = torch.device("cpu")
        self.calls = []
        self.script = script  # prompt length -> new token ids
        self.fail_width = fail_width
        self.model = self

    def generate(self, input_ids, attention_mask, generation_config, logits_processor=None):
        self.calls.append((input_ids.clone(), attention_mask.clone(), generation_config))
        if self.fail_width is not None and input_ids.shape[0] > 1:
            raise RuntimeError("CUDA out of memory (pretend)")
        lengths = attention_mask.sum(1).tolist()
        if self.fail_width is not None and self.fail_width in lengths:
            raise RuntimeError("this prompt always fails")
        new = [self.script[n] for n in lengths]
        width = max(len(x) for x in new)
        pad = self.tokenizer.pad_token_id
        rows = [x + [pad] * (width - len(x)) for x in new]
        return torch.cat([input_ids, torch.tensor(rows, dtype=torch.long)], dim=1)


def test_hf_batches_left_padded_sorted_and_stops_at_eos(smol_tokenizer):
    tok = smol_tokenizer
    eos = tok.eos_token_id
    word = tok(" word", add_special_tokens=False)["input_ids"]
    texts = ["short", "a much longer prompt than the others, really", "middle sized prompt"]
    reqs = [GenerationRequest(f"k{i}", text=t) for i, t in enumerate(texts)]
    lens = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    script = {lens[0]: word + [eos], lens[1]: word * 3, lens[2]: [eos]}
    lm = FakeLM(tok, script)
    gen = HFGenerator(batch_size=2, max_new_tokens=3)
    gen.use_lm(lm)
    out = gen.generate(reqs)
    assert [g.key for g in out] == ["k0", "k1", "k2"]
    assert (out[0].text, out[0].finish_reason, out[0].completion_tokens) == (" word", "stop", len(word) + 1)
    assert (out[1].finish_reason, out[1].completion_tokens) == ("length", 3 * len(word))
    assert (out[2].text, out[2].finish_reason, out[2].prompt_tokens) == ("", "stop", lens[2])
    (ids1, mask1, cfg1), (ids2, mask2, _) = lm.calls
    # longest first; left padding: every row ends with its prompt, padding (mask 0) on the left
    assert ids1.shape == (2, lens[1]) and mask1[1].tolist() == [0] * (lens[1] - lens[2]) + [1] * lens[2]
    assert ids1[1, -lens[2]:].tolist() == tok(texts[2], add_special_tokens=False)["input_ids"]
    assert ids2.shape == (1, lens[0])
    assert cfg1.do_sample is False and cfg1.max_new_tokens == 3 and eos in list(cfg1.eos_token_id)


def test_hf_renders_the_chat_template_and_isolates_failures(smol_tokenizer):
    tok = smol_tokenizer
    msgs = user("hello")
    text = render_chat(tok, msgs)
    assert text.endswith("<|im_start|>assistant\n") and "<|im_start|>system\nsys" in text
    n_ok = len(tok(render_chat(tok, user("this one is fine")), add_special_tokens=False)["input_ids"])
    n_bad = len(tok(text, add_special_tokens=False)["input_ids"])
    assert n_ok != n_bad
    lm = FakeLM(tok, {n_ok: [tok.eos_token_id]}, fail_width=n_bad)
    gen = HFGenerator(batch_size=4)
    gen.use_lm(lm)
    out = gen.generate([GenerationRequest("bad", msgs), GenerationRequest("ok", user("this one is fine"))])
    assert out[0].error == "RuntimeError: this prompt always fails" and out[1].ok and out[1].finish_reason == "stop"
    assert [c[0].shape[0] for c in lm.calls] == [2, 1, 1]  # the batch, then one by one


def test_hf_checks_and_needs_a_bound_model():
    with pytest.raises(ValueError, match="batch_size=0"):
        HFGenerator(batch_size=0)
    with pytest.raises(ValueError, match="temperature"):
        HFGenerator(temperature=-1)
    with pytest.raises(RuntimeError, match="no model bound"):
        HFGenerator().generate([GenerationRequest("a", user("x"))])
    with pytest.raises(ValueError, match="LoadedLM"):
        HFGenerator().use_lm(None)
    cfg = _compose([])
    gen = build(cfg.generator, "generator", Generator)
    assert isinstance(gen, HFGenerator) and (gen.batch_size, gen.max_new_tokens, gen.temperature) == (8, 512, 0.0)


@pytest.mark.slow
def test_hf_on_smollm2_batched_equals_one_by_one(smollm2):
    prompts = ["What is the capital of France?", "Name a colour."]
    reqs = [GenerationRequest(str(i), [{"role": "user", "content": p}]) for i, p in enumerate(prompts)]
    batched = HFGenerator(batch_size=2, max_new_tokens=8)
    batched.use_lm(smollm2)
    single = HFGenerator(batch_size=1, max_new_tokens=8)
    single.use_lm(smollm2)
    a, b = batched.generate(reqs), single.generate(reqs)
    assert [g.text for g in a] == [g.text for g in b] and all(g.ok for g in a)
    assert all(g.completion_tokens <= 8 and g.finish_reason in ("stop", "length") for g in a)
    assert "Paris" in a[0].text
    s1 = HFGenerator(max_new_tokens=3, temperature=1.0, seed=3)
    s1.use_lm(smollm2)
    assert [g.text for g in s1.generate(reqs[:1])] == [g.text for g in s1.generate(reqs[:1])]  # seeded sampling


# --- box_on_stop (BoxGuard) -------------------------------------------------------------------------------------------

def _greedy_with_guard(tok, prompt_ids, wants, steps=60):
    """A greedy loop over a scripted 'model': ``wants(generated_text)`` names the token it prefers next."""
    from ctxbench.generators.box_guard import BoxGuard

    stops = eos_ids(tok)
    guard = BoxGuard(tok, len(prompt_ids), stops)
    ids = list(prompt_ids)
    for _ in range(steps):
        scores = torch.zeros(1, len(tok))
        scores[0, wants(tok.decode(ids[len(prompt_ids):], skip_special_tokens=True))] = 1.0
        nxt = int(guard(torch.tensor([ids]), scores).argmax())
        ids.append(nxt)
        if nxt in stops:
            break
    return ids[len(prompt_ids):], guard.forced.get(0, [])


def test_box_guard_opens_the_box_when_the_model_stops_and_ends_it_when_closed(smol_tokenizer):
    tok = smol_tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    sentence = tok(" The answer is 4.", add_special_tokens=False)["input_ids"]

    def wants(text):  # writes one sentence, then wants to stop; inside a box it writes the sentence again
        written = tok(text.split("\\box{")[-1], add_special_tokens=False)["input_ids"] if text else []
        return sentence[len(written)] if len(written) < len(sentence) else eos

    new, forced = _greedy_with_guard(tok, tok("Q?", add_special_tokens=False)["input_ids"], wants)
    text = tok.decode(new, skip_special_tokens=True)
    assert new[-1] in eos_ids(tok) and forced == ["open_box", "close_box"]
    assert text == " The answer is 4.\n\\box{ The answer is 4.}"
    split = split_boxed_generation(text)
    assert split.ok and (split.thinking, split.answer) == ("The answer is 4.", "The answer is 4.")


def test_box_guard_leaves_a_boxing_model_alone_and_stops_after_its_box(smol_tokenizer):
    tok = smol_tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    full = tok(" Two and two. \\box{It is 4.} And more text", add_special_tokens=False)["input_ids"]

    def wants(text):  # the model's own box, then text after it that the guard must cut
        n = len(tok(text, add_special_tokens=False)["input_ids"]) if text else 0
        return full[n] if n < len(full) else eos

    new, forced = _greedy_with_guard(tok, [1, 2], wants)
    assert tok.decode(new, skip_special_tokens=True) == " Two and two. \\box{It is 4.}" and forced == ["end_after_box"]


def test_box_guard_in_transformers_generate_on_a_tiny_llama(smol_tokenizer):
    """Through HFGenerator and transformers' generate: a model that always wants to stop gets the box opened, closed
    and ended, and nothing else (its own choices are all EOS)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    tok = smol_tokenizer
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(LlamaConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=64), attn_implementation="eager").eval()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    model.lm_head.register_forward_hook(lambda m, i, out: out.index_add(
        -1, torch.tensor([eos]), torch.full((*out.shape[:-1], 1), 1e4)))

    class LM:
        tokenizer, device = tok, torch.device("cpu")

    LM.model = model
    for box_on_stop, expected, forced in ((False, "", []), (True, "\n\\box{}", ["open_box", "close_box"])):
        gen = HFGenerator(batch_size=2, max_new_tokens=12, box_on_stop=box_on_stop)
        gen.use_lm(LM)
        out = gen.generate([GenerationRequest("a", text="Hello there"), GenerationRequest("b", text="Hi")])
        assert [(g.text, g.finish_reason, g.forced) for g in out] == [(expected, "stop", forced)] * 2
