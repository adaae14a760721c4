"""Needle-in-a-haystack (RULER's niah family): single, multikey, multi-query and multi-value variants.

Haystacks: ``noise`` (the noise line repeated, joined by "\\n"), ``needle`` (distractor needles with other keys, joined
by "\\n"): as upstream, each needle is inserted right before a distinct haystack line drawn at random, so two needles
are never adjacent and no needle is the last line (``common.insert_before_distinct_rows``; the haystack therefore has at
least as many lines as there are needles). ``essay`` (sentences of the offline Wikipedia summaries, see
``text_sources``, a random stretch per sample, joined by " "): needles inserted before sentence int(n * depth / 100),
depths drawn without replacement from 40 evenly spaced percentages (upstream's scheme; depth 100 is the end).

Evidence (``needle_spans``): the needles of the queried keys. Needles of non-queried keys (multikey distractors, the
``needle`` haystack) are distractors, not evidence. For FlashTrace's tasks (niah_mq_q*, niah_mv_v*) every inserted
keyed needle is queried, so every inserted needle is one entry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import ContextBuilder, derive_rng, fill_template, input_budget, insert_before_distinct_rows
from .length import Fit, TokenCounter, UnitCosts, fit_units
from .text_sources import NOISE_LINE, distinct_keys, wiki_sentences

TEMPLATE = ("Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
            "I will quiz you about the {type_needle_v} afterwards.\n{context}\n"
            "What are all the special magic {type_needle_v} for {query} mentioned in the provided text?")
ANSWER_PREFIX = " The special magic {type_needle_v} for {query} mentioned in the provided text are"
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
ESSAY_LOOKAHEAD = 8
DEPTHS = [int(d) for d in np.round(np.linspace(0, 100, num=40, endpoint=True))]


@dataclass(frozen=True)
class NiahParams:
    haystack: str = "essay"     # noise | essay | needle
    type_k: str = "words"       # words | numbers | uuids
    type_v: str = "numbers"
    num_k: int = 1              # keys with needles
    num_v: int = 1              # values per key
    num_q: int = 1              # keys queried
    tokens_to_generate: int = 128


def _singular(text: str) -> str:
    # Upstream's wording change when a single value is asked for (applied to the template text only).
    return (text.replace("Some", "A").replace("are all", "is").replace("are", "is").replace("answers", "answer"))


def generate_sample(p: NiahParams, index: int, *, counter: TokenCounter, budget: int, seed: int, task: str,
                    reserve_gold: bool = True):
    if p.num_q > p.num_k:
        raise ValueError(f"{task}: num_q={p.num_q} > num_k={p.num_k}")
    if p.haystack == "essay" and p.num_k * p.num_v > len(DEPTHS):
        raise ValueError(f"{task}: at most {len(DEPTHS)} needles fit the essay depths")
    rng = derive_rng(seed, task, index, "needles")
    keys = distinct_keys(rng, p.type_k, p.num_k)
    values = distinct_keys(rng, p.type_v, p.num_k * p.num_v, avoid=set(keys))
    needles = [(k, ki, values[ki * p.num_v + j]) for ki, k in enumerate(keys) for j in range(p.num_v)]
    rng.shuffle(needles)
    queried = rng.sample(range(p.num_k), p.num_q)
    queries = [keys[i] for i in queried]
    outputs = [values[i * p.num_v + j] for i in queried for j in range(p.num_v)]
    query = queries[0] if len(queries) == 1 else ", ".join(queries[:-1]) + ", and " + queries[-1]
    needle_texts = [NEEDLE.format(type_needle_v=p.type_v, key=k, value=v) for k, _, v in needles]
    is_evidence = [ki in set(queried) for _, ki, _ in needles]

    template, prefix, type_v = TEMPLATE, ANSWER_PREFIX, p.type_v
    if p.num_q * p.num_v == 1:
        template, prefix, type_v = _singular(TEMPLATE), _singular(ANSWER_PREFIX), p.type_v[:-1]
    answer_prefix = prefix.format(type_needle_v=type_v, query=query)

    units, sep = _haystack_units(p, rng, index, seed, task, used=set(keys) | set(values), counter=counter)
    place_seed = (seed, task, index, "place")

    m = len(needle_texts)
    # Line haystacks always hold the m lines the needles stand before; the fit adds lines beyond them.
    base = 0 if p.haystack == "essay" else m

    def render(chosen: list[int]):
        ctx = ContextBuilder("\n" if p.haystack != "essay" else " ")
        prng = derive_rng(*place_seed)
        if p.haystack == "essay":
            n = len(chosen)
            # Needles go before sentence int(n * depth / 100), depths drawn without replacement (upstream's scheme).
            cuts = sorted(int(n * d / 100) for d in prng.sample(DEPTHS, m))
            j = 0
            for u in range(n + 1):
                while j < m and cuts[j] == u:
                    ctx.add(needle_texts[j], evidence=is_evidence[j], unit_index=u + j)
                    j += 1
                if u < n:
                    ctx.add(units(chosen[u]))
        else:
            lines = [(units(i), None) for i in range(base)] + [(units(base + c), None) for c in chosen]
            needles = [(t, j) for j, t in enumerate(needle_texts)]
            for u, (text, j) in enumerate(insert_before_distinct_rows(lines, needles, prng)):
                ctx.add(text, evidence=j is not None and is_evidence[j], unit_index=u)
        return fill_template(template, ctx.text(), ctx.evidence, type_needle_v=type_v, query=query)

    costs = UnitCosts(counter, lambda i: sep + units(base + i), units.size - base, chunk=16)
    # Essay sentences vary in length: look a little further for ones that still fit the last few tokens.
    # Upstream's rule: input + answer prefix + tokens_to_generate <= max_seq_length.
    fit: Fit = fit_units(render, lambda pr: pr.input + answer_prefix, costs,
                         input_budget(counter, budget, answer_prefix, outputs, p.tokens_to_generate, reserve_gold),
                         counter, lookahead=ESSAY_LOOKAHEAD if p.haystack == "essay" else 0)
    return fit, outputs, answer_prefix


class _Units:
    """Haystack unit i as text; ``size`` = how many exist for this sample."""

    def __init__(self, get, size):
        self.get, self.size = get, size

    def __call__(self, i: int) -> str:
        return self.get(i)


def _haystack_units(p: NiahParams, rng, index, seed, task, *, used: set, counter: TokenCounter):
    if p.haystack == "noise":
        return _Units(lambda i: NOISE_LINE, 1_000_000), "\n"
    if p.haystack == "essay":
        sents = wiki_sentences()
        start = derive_rng(seed, task, index, "essay").randrange(len(sents))
        # A contiguous stretch from a random start (wrapping): every sample reads different real prose.
        return _Units(lambda i: sents[(start + i) % len(sents)], len(sents)), " "
    if p.haystack == "needle":
        drng = derive_rng(seed, task, index, "distractors")
        cache: list[str] = []
        seen = set(used)

        def get(i: int) -> str:
            while len(cache) <= i:
                k = distinct_keys(drng, p.type_k, 1, avoid=seen)[0]
                seen.add(k)
                v = distinct_keys(drng, p.type_v, 1, avoid=seen)[0]
                seen.add(v)
                cache.append(NEEDLE.format(type_needle_v=p.type_v, key=k, value=v))
            return cache[i]
        return _Units(get, 100_000), "\n"
    raise ValueError(f"unknown haystack {p.haystack!r}: expected noise, essay or needle")
