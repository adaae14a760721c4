"""Variable tracking (RULER's vt family): h hops, c chains, noise haystack, one-shot worked example.

Each chain: h+1 distinct 5-letter upper-case names, "VAR A = 12345" then "VAR B = VAR A " ... (upstream's trailing
space kept in the text, outside the evidence span), inserted in order at sorted random noise-line slots. The query is
chain 0's value; outputs = chain 0's names. Evidence (``needle_spans``): the statements of chain 0 only; the other chains
are distractors.

One-shot example (as upstream): a complete worked task prepended to the input, with its own chains (3-letter names,
min(h, 10) hops, fresh random names and value per sample), its answer written out, then "\\n". Upstream sizes it to about
500 tokens; here it gets ``min(500, max_seq_length // 2)`` tokens (= upstream at 1,024 and above) so short inputs keep room.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from .common import ContextBuilder, derive_rng, fill_template
from .length import TokenCounter, UnitCosts, fit_units
from .text_sources import NOISE_LINE

TEMPLATE = ("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
            "Question: Find all variables that are assigned the value {query} in the text above.")
ANSWER_PREFIX = (" Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are "
                 "assigned the value {query}, they are: ")
ICL_MAX_TOKENS = 500


@dataclass(frozen=True)
class VtParams:
    num_hops: int = 4
    num_chains: int = 1
    tokens_to_generate: int = 30
    icl: bool = True


def _names(rng, n: int, k: int) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        name = "".join(rng.choices(string.ascii_uppercase, k=k))
        if name not in out:
            out.append(name)
    return out


def _values(rng, n: int, avoid: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        v = str(rng.randint(10000, 99999))
        if v not in out and v not in avoid:
            out.append(v)
    return out


def _chains(rng, num_chains: int, num_hops: int, name_len: int, avoid_values: set[str]):
    names = _names(rng, num_chains * (num_hops + 1), name_len)
    values = _values(rng, num_chains, avoid_values)
    chains, chain_names = [], []
    for c in range(num_chains):
        vs = names[c * (num_hops + 1):(c + 1) * (num_hops + 1)]
        chain_names.append(vs)
        chains.append([f"VAR {vs[0]} = {values[c]}"] + [f"VAR {vs[j + 1]} = VAR {vs[j]} " for j in range(num_hops)])
    return chains, chain_names, values


def _context(chains, n: int, placement_rng, evidence_chain: int | None) -> ContextBuilder:
    """n noise lines with each chain's statements in order at sorted random slots, joined by "\\n"."""
    # rows: (text, chain or None); each chain's slots are drawn among the rows present so far, like upstream.
    rows: list[tuple[str, int | None]] = [(NOISE_LINE, None)] * n
    for c, chain in enumerate(chains):
        slots = sorted(placement_rng.sample(range(len(rows) + len(chain)), len(chain)))
        for j, s in enumerate(slots):
            rows.insert(s, (chain[j], c))  # ascending slots keep the statements in chain order
    ctx = ContextBuilder("\n")
    for i, (text, c) in enumerate(rows):
        ctx.add(text, evidence=(c is not None and c == evidence_chain), unit_index=i)
    return ctx


def icl_budget(max_seq_length: int) -> int:
    return min(ICL_MAX_TOKENS, max_seq_length // 2)


def _icl_text(p: VtParams, rng, n_lines: int, avoid_values: set[str]) -> str:
    chains, names, values = _chains(rng, p.num_chains, min(10, p.num_hops), 3, avoid_values)
    ctx = _context(chains, n_lines, rng, None)
    shot = fill_template(TEMPLATE + ANSWER_PREFIX, ctx.text(), [], query=values[0], num_v=len(names[0]))
    # No doubled blank after the answer prefix's own trailing space.
    sep = "" if shot.input[-1:].isspace() else " "
    return shot.input + sep + " ".join(names[0]) + "\n"


def icl_noise_lines(p: VtParams, counter: TokenCounter, budget: int, seed: int, task: str) -> int:
    """Noise lines of the worked example, sized once per task (as upstream) to fit ``budget`` tokens."""
    if not p.icl:
        return 0
    probe = derive_rng(seed, task, "icl-size")
    state = probe.getstate()

    def render(chosen: list[int]) -> str:
        probe.setstate(state)
        return _icl_text(p, probe, len(chosen), set())

    costs = UnitCosts(counter, lambda i: "\n" + NOISE_LINE, 100_000)
    return fit_units(render, lambda s: s, costs, budget, counter).n_units


def generate_sample(p: VtParams, index: int, *, counter: TokenCounter, budget: int, seed: int, task: str,
                    icl_lines: int):
    rng = derive_rng(seed, task, index, "chains")
    chains, names, values = _chains(rng, p.num_chains, p.num_hops, 5, set())
    prefix = _icl_text(p, derive_rng(seed, task, index, "icl"), icl_lines, set(values)) + "\n" if p.icl else ""
    query, num_v = values[0], p.num_hops + 1

    def render(chosen: list[int]):
        ctx = _context(chains, len(chosen), derive_rng(seed, task, index, "place"), 0)
        return fill_template(TEMPLATE, ctx.text(), ctx.evidence, prefix=prefix, query=query, num_v=num_v)

    costs = UnitCosts(counter, lambda i: "\n" + NOISE_LINE, 1_000_000)
    fit = fit_units(render, lambda pr: pr.input, costs, budget, counter)
    return fit, list(names[0]), ANSWER_PREFIX.format(query=query, num_v=num_v)
