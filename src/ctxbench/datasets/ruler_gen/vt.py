"""Variable tracking (RULER's vt family): h hops, c chains, noise haystack, one-shot worked example.

Each chain: h+1 distinct 5-letter upper-case names, "VAR A = 12345" then "VAR B = VAR A " ... (upstream's trailing
space kept in the text, outside the evidence span). The query is chain 0's value; outputs = chain 0's names. Evidence
(``needle_spans``): the statements of chain 0 only; the other chains are distractors.

Placement as upstream: chain by chain, each statement is inserted right before a distinct noise unit drawn at random
among the units present so far (noise units and the earlier chains' statements), keeping the chain's order; so two
statements of one chain are never adjacent and no statement is the last line before the question. Each statement is a
line of its own. The noise unit is the whole noise line (current upstream: lines joined by "\\n"), as long as the
budget holds the h+1 lines the first chain needs. When it does not (vt_h10_c1 at 1,024 tokens: its worked example and
its task each need eleven noise lines, ~500 tokens each with SmolLM2's tokenizer), the unit becomes one sentence of the
noise line, as upstream RULER did until December 2024 when a haystack had too few lines for a chain: the noise reads
as before (its sentences joined by " ", a line break after "There and back again."), and a statement may then stand
between two sentences of a noise line, on its own line. Which unit is used is recorded nowhere but visible in the
text: a probe sample decides it once per task (``noise_units``), and a sample whose h+1 whole lines do not fit after
all falls back to sentences.

One-shot example (as upstream): a complete worked task prepended to the input, with its own chains (3-letter names,
min(h, 10) hops, fresh random names and values per sample, placed the same way), its answer written out, then "\\n".
Upstream sizes it to about 500 tokens (its answer included); here too from 1,024 tokens on, while below that it gets
``max(max_seq_length - 524, 3/8 of max_seq_length)`` tokens so short inputs keep room for the task (``icl_budget``), or
more when even its minimal form (h+1 noise sentences) needs more.

Deliberate difference: upstream gives every chain of the example the same value (12345, then one random value), so
with several chains (vt_h2_c3) its written answer lists only chain 0's names while all chains hold the queried value:
a worked example contradicting its own question. Here each chain of the example has its own value, so the example is
correct (the main task never shared values, upstream or here).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from .common import ContextBuilder, derive_rng, fill_template, input_budget, insert_before_distinct_rows
from .length import BudgetTooSmall, TokenCounter, UnitCosts, fit_units
from .text_sources import NOISE_LINE

TEMPLATE = ("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
            "Question: Find all variables that are assigned the value {query} in the text above.")
ANSWER_PREFIX = (" Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are "
                 "assigned the value {query}, they are: ")
ICL_MAX_TOKENS = 500
NOISE_SENTENCES = tuple(s if s.endswith(".") else s + "." for s in NOISE_LINE.split(". "))
LINE, SENTENCE = "line", "sentence"  # noise units


@dataclass(frozen=True)
class VtParams:
    num_hops: int = 4
    num_chains: int = 1
    tokens_to_generate: int = 30
    icl: bool = True


@dataclass(frozen=True)
class IclLayout:
    """Noise of the worked example, sized once per task: ``n`` units of kind ``unit`` (line | sentence)."""
    unit: str
    n: int


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


def _noise_unit(unit: str, i: int) -> str:
    return NOISE_LINE if unit == LINE else NOISE_SENTENCES[i % len(NOISE_SENTENCES)]


def _noise_sep(unit: str, i: int) -> str:
    """Separator before noise unit i when it follows noise unit i - 1."""
    return "\n" if unit == LINE or i % len(NOISE_SENTENCES) == 0 else " "


def _context(chains, unit: str, n: int, placement_rng, evidence_chain: int | None) -> ContextBuilder:
    """n noise units with the chains' statements placed the upstream way (see the module doc)."""
    rows: list[tuple[str, int | None, int]] = [(_noise_unit(unit, i), None, i) for i in range(n)]
    for c, chain in enumerate(chains):
        rows = insert_before_distinct_rows(rows, [(statement, c, -1) for statement in chain], placement_rng)
    ctx = ContextBuilder("\n")
    prev_noise = False
    for i, (text, c, k) in enumerate(rows):
        noise = c is None
        sep = _noise_sep(unit, k) if (noise and prev_noise) else "\n"
        ctx.add(text, evidence=(c is not None and c == evidence_chain), unit_index=i, sep=sep)
        prev_noise = noise
    return ctx


def min_noise_units(num_hops: int) -> int:
    """Noise units the first chain's statements stand before (the later chains may also stand before statements)."""
    return num_hops + 1


def _unit_costs(counter: TokenCounter, unit: str, base: int) -> UnitCosts:
    # Unit i of the fit is noise unit base + i with the separator before it (exact when it follows noise).
    return UnitCosts(counter, lambda i: _noise_sep(unit, base + i) + _noise_unit(unit, base + i), 1_000_000)


def icl_budget(max_seq_length: int) -> int:
    """Upstream's 500 tokens from 1,024 on; below, what leaves the task 5/8 of the length (or 524 tokens)."""
    return min(ICL_MAX_TOKENS, max(max_seq_length - 524, max_seq_length * 3 // 8))


def _icl_text(p: VtParams, rng, layout: IclLayout, avoid_values: set[str]) -> str:
    chains, names, values = _chains(rng, p.num_chains, min(10, p.num_hops), 3, avoid_values)
    ctx = _context(chains, layout.unit, layout.n, rng, None)
    shot = fill_template(TEMPLATE + ANSWER_PREFIX, ctx.text(), [], query=values[0], num_v=len(names[0]))
    # No doubled blank after the answer prefix's own trailing space.
    sep = "" if shot.input[-1:].isspace() else " "
    return shot.input + sep + " ".join(names[0]) + "\n"


def icl_layout(p: VtParams, counter: TokenCounter, budget: int, seed: int, task: str) -> IclLayout | None:
    """The worked example's noise, sized once per task (as upstream) to fit ``budget`` tokens: whole lines when h+1 of
    them fit, else sentences; at least h+1 sentences even when that alone exceeds ``budget``."""
    if not p.icl:
        return None
    probe = derive_rng(seed, task, "icl-size")
    state = probe.getstate()
    base = min_noise_units(min(10, p.num_hops))
    for unit in (LINE, SENTENCE):
        def render(chosen: list[int], unit=unit) -> str:
            probe.setstate(state)
            return _icl_text(p, probe, IclLayout(unit, base + len(chosen)), set())
        try:
            fit = fit_units(render, lambda s: s, _unit_costs(counter, unit, base), budget, counter)
        except BudgetTooSmall:
            continue
        return IclLayout(unit, base + fit.n_units)
    return IclLayout(SENTENCE, base)


class _Sample:
    """One sample's chains, worked example and prompt parts; ``render(unit, chosen)`` = its prompt with base +
    len(chosen) noise units."""

    def __init__(self, p: VtParams, index, *, counter: TokenCounter, budget: int, seed: int, task: str,
                 icl_layout: IclLayout | None, reserve_gold: bool):
        self.p, self.index, self.seed, self.task = p, index, seed, task
        rng = derive_rng(seed, task, index, "chains")
        self.chains, names, values = _chains(rng, p.num_chains, p.num_hops, 5, set())
        self.outputs = list(names[0])
        self.prefix = ""
        if p.icl and icl_layout is not None:
            self.prefix = _icl_text(p, derive_rng(seed, task, index, "icl"), icl_layout, set(values)) + "\n"
        self.query, self.num_v = values[0], p.num_hops + 1
        self.answer_prefix = ANSWER_PREFIX.format(query=self.query, num_v=self.num_v)
        self.base = min_noise_units(p.num_hops)
        # Upstream's rule: input + answer prefix + tokens_to_generate <= max_seq_length.
        self.limit = input_budget(counter, budget, self.answer_prefix, self.outputs, p.tokens_to_generate,
                                  reserve_gold)

    def render(self, unit: str, chosen: list[int]):
        placement = derive_rng(self.seed, self.task, self.index, "place")
        ctx = _context(self.chains, unit, self.base + len(chosen), placement, 0)
        return fill_template(TEMPLATE, ctx.text(), ctx.evidence, prefix=self.prefix, query=self.query,
                             num_v=self.num_v)

    def text(self, prompt) -> str:
        return prompt.input + self.answer_prefix


def noise_units(p: VtParams, *, counter: TokenCounter, budget: int, seed: int, task: str,
                icl_layout: IclLayout | None, reserve_gold: bool = True) -> tuple[str, ...]:
    """The noise units a task tries, decided once per task on a probe sample: whole lines then sentences, or sentences
    only when the probe's h+1 lines leave less than 2% of the budget (no sample would fit them)."""
    probe = _Sample(p, "probe", counter=counter, budget=budget, seed=seed, task=task, icl_layout=icl_layout,
                    reserve_gold=reserve_gold)
    if counter.count(probe.text(probe.render(LINE, []))) <= probe.limit * 0.98:
        return (LINE, SENTENCE)
    return (SENTENCE,)


def generate_sample(p: VtParams, index: int, *, counter: TokenCounter, budget: int, seed: int, task: str,
                    icl_layout: IclLayout | None = None, reserve_gold: bool = True, icl_lines: int | None = None,
                    units: tuple[str, ...] = (LINE, SENTENCE)):
    if icl_layout is None and icl_lines is not None:  # the earlier API: whole noise lines
        icl_layout = IclLayout(LINE, icl_lines)
    sample = _Sample(p, index, counter=counter, budget=budget, seed=seed, task=task, icl_layout=icl_layout,
                     reserve_gold=reserve_gold)
    for k, unit in enumerate(units):
        try:
            fit = fit_units(lambda chosen, unit=unit: sample.render(unit, chosen), sample.text,
                            _unit_costs(counter, unit, sample.base), sample.limit, counter)
        except BudgetTooSmall as e:
            if k == len(units) - 1:
                raise BudgetTooSmall(f"{task}: {e}") from None
            continue
        return fit, sample.outputs, sample.answer_prefix
    raise ValueError(f"{task}: no noise unit given")
