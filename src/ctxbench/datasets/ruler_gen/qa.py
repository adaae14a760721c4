"""Multi-document QA ``hotpotqa_long`` from MoreHopQA-format data (HotpotQA itself is not available offline).

Per sample one row: query = ``previous_question`` (the original multi-hop question), outputs = [``previous_answer``].
Gold documents = the row's ``context`` paragraphs (title, sentences), all always present. A paragraph's text is its
sentences joined as written, with one space added between two sentences where neither side has whitespace (most
MoreHopQA sentences carry no leading space, so a plain join would read "Balser.It was"); evidence offsets follow the
joined text.

Distractors = paragraphs of the other rows (distinct titles, none equal to a gold title; the first text of a title in
the file wins), ranked by BM25 similarity to the question, standing in for HotpotQA's retrieved hard distractors
(MoreHopQA rows keep only their gold paragraphs): ``bm25s`` (Lucene variant, k1 = 1.5, b = 0.75) over "title text" of
every paragraph of the file, tokenised by ``bm25s.tokenize`` (lower-cased, tokens = runs of two or more word characters,
``bm25s``'s English stop words removed, no stemming); ties broken by the paragraphs' title order; paragraphs sharing no
term with the question follow in a random order per sample. Distractors are added in rank order until the length budget
is reached (one that does not fit is skipped for the next); then all documents are shuffled and printed as
"Document {i}:\\n{title}\\n{text}" joined by "\\n\\n".

Gold spans (``needle_spans``) = the supporting sentences: a HotpotQA-style ``supporting_facts`` list ([title, sentence
index] pairs) when the row has one; otherwise, for each step of ``question_decomposition`` with a
``paragraph_support_title``, the sentences of that paragraph that contain the step's answer (all of the paragraph's
sentences when none does: MoreHopQA keeps no sentence-level labels), each labelled with its step (``hop``, 1-based:
the first hop's sentence is the bridge to the second paragraph). Rows: the rows whose gold documents alone fit the
budget, in a seeded order fixed per task; sample i takes row i (modulo their number), so samples ask distinct questions
as long as there are rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

from ctxbench.datasets.sentences import join_sentences
from ctxbench.retrievers.bm25 import bm25_tokenize, bm25s_module

from .common import ContextBuilder, derive_rng, fill_template, input_budget
from .length import BudgetTooSmall, TokenCounter, UnitCosts, fit_units

TEMPLATE = ("Answer the question based on the given documents. Only give me the answer and do not output any other "
            "words.\n\nThe following are given documents.\n\n{context}\n\nAnswer the question based on the given "
            "documents. Only give me the answer and do not output any other words.\n\nQuestion: {query}")
ANSWER_PREFIX = " Answer:"


@dataclass(frozen=True)
class QaParams:
    tokens_to_generate: int = 32


@dataclass(frozen=True)
class Paragraph:
    title: str
    sentences: tuple[str, ...]

    @cached_property
    def _joined(self) -> tuple[str, tuple[int, ...]]:
        return join_sentences(self.sentences)

    @property
    def text(self) -> str:
        return self._joined[0]

    @property
    def starts(self) -> tuple[int, ...]:
        """Offset of each sentence inside ``text``."""
        return self._joined[1]


@dataclass(frozen=True)
class QaRow:
    question: str
    answer: str
    gold: tuple[Paragraph, ...]
    support: tuple[tuple[str, int], ...]  # (title, sentence index)
    hops: dict = field(default_factory=dict, hash=False, compare=False)  # (title, sentence index) -> step, 1-based


def _support(row: dict, gold: tuple[Paragraph, ...]) -> tuple[tuple[str, int], ...]:
    by_title = {p.title: p for p in gold}
    if row.get("supporting_facts"):
        pairs = {(t, int(i)) for t, i in row["supporting_facts"]
                 if t in by_title and int(i) < len(by_title[t].sentences)}
    else:
        pairs = set()
        for step in row.get("question_decomposition") or []:
            para = by_title.get(step.get("paragraph_support_title") or "")
            if para is None:
                continue
            ans = str(step.get("answer") or "").strip().lower()
            hits = [i for i, s in enumerate(para.sentences) if ans and ans in s.lower()]
            pairs.update((para.title, i) for i in (hits or range(len(para.sentences))))
    if not pairs:  # no usable label: every gold sentence is support
        pairs = {(p.title, i) for p in gold for i in range(len(p.sentences))}
    return tuple(sorted(pairs))


def _hops(row: dict, gold: tuple[Paragraph, ...]) -> dict[tuple[str, int], int]:
    """The reasoning step (1-based, in ``question_decomposition`` order) each support sentence serves, found as
    ``_support`` finds it; a sentence two steps share is the first one's. Empty for a row without a decomposition
    (a ``supporting_facts`` row has no step order)."""
    if row.get("supporting_facts"):
        return {}
    by_title = {p.title: p for p in gold}
    out: dict[tuple[str, int], int] = {}
    for step, part in enumerate(row.get("question_decomposition") or [], 1):
        para = by_title.get(part.get("paragraph_support_title") or "")
        if para is None:
            continue
        ans = str(part.get("answer") or "").strip().lower()
        hits = [i for i, s in enumerate(para.sentences) if ans and ans in s.lower()]
        for i in hits or range(len(para.sentences)):
            out.setdefault((para.title, i), step)
    return out


@lru_cache(maxsize=4)
def load_rows(path: str) -> tuple[tuple[QaRow, ...], tuple[Paragraph, ...]]:
    """(rows, paragraph pool) of a MoreHopQA-format JSON array."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON array of MoreHopQA rows")
    rows, pool = [], {}
    for n, r in enumerate(data):
        try:
            gold = tuple(Paragraph(str(t), tuple(str(s) for s in sents)) for t, sents in r["context"])
            q, a = r.get("previous_question") or r["question"], r.get("previous_answer") or r["answer"]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: row {n}: field 'context'/'previous_question'/'previous_answer': {e!r}") from None
        gold = tuple(p for p in gold if p.text.strip())
        rows.append(QaRow(str(q), str(a), gold, _support(r, gold), _hops(r, gold)))
        for p in gold:
            pool.setdefault(p.title, p)  # first text of a title wins: deterministic
    return tuple(rows), tuple(pool[t] for t in sorted(pool))


class DistractorRanker:
    """BM25 over the paragraph pool of one file (see the module doc); built once per file."""

    def __init__(self, pool: tuple[Paragraph, ...]):
        self.pool = pool
        self._index = bm25s_module().BM25(k1=1.5, b=0.75, method="lucene", backend="numpy", csc_backend="numpy")
        self._index.index(bm25_tokenize([f"{p.title} {p.text}" for p in pool], "en"), show_progress=False)
        self._vocab = set(self._index.vocab_dict)

    def scores(self, question: str) -> np.ndarray:
        terms = [t for t in bm25_tokenize([question], "en")[0] if t in self._vocab]
        if not terms:
            return np.zeros(len(self.pool), dtype=np.float64)
        return np.asarray(self._index.get_scores(terms), dtype=np.float64)

    def ranked(self, question: str, exclude_titles: set[str], rng) -> list[Paragraph]:
        """Pool paragraphs not in ``exclude_titles``: those sharing a term with the question by decreasing BM25 score
        (ties: pool order, i.e. title order), then the rest in ``rng``'s random order."""
        scores = self.scores(question)
        keep = [i for i, p in enumerate(self.pool) if p.title not in exclude_titles]
        hits = sorted((i for i in keep if scores[i] > 0), key=lambda i: (-scores[i], i))
        rest = [i for i in keep if not scores[i] > 0]
        rng.shuffle(rest)
        return [self.pool[i] for i in hits + rest]


@lru_cache(maxsize=4)
def _ranker(path: str) -> DistractorRanker:
    return DistractorRanker(load_rows(path)[1])


def _doc(number: int, p: Paragraph) -> str:
    return f"Document {number}:\n{p.title}\n{p.text}"


def row_order(p: QaParams, *, counter: TokenCounter, budget: int, seed: int, task: str, morehopqa_path: str | Path,
              reserve_gold: bool = True) -> tuple[int, ...]:
    """The rows a task draws from, in a seeded order, once per task: those whose gold documents alone fit the budget
    (so sample i uses row order[i % len(order)] and the first len(order) samples ask distinct questions)."""
    path = str(Path(morehopqa_path).resolve())
    rows, _pool = load_rows(path)
    if not rows:
        raise ValueError(f"{morehopqa_path}: no rows")
    order = list(range(len(rows)))
    derive_rng(seed, task, "rows").shuffle(order)
    bare = [_bare_prompt(rows[r]) + ANSWER_PREFIX for r in order]
    tokens = counter.units(bare)
    usable = tuple(r for r, t in zip(order, tokens)
                   if t <= input_budget(counter, budget, ANSWER_PREFIX, [rows[r].answer], p.tokens_to_generate,
                                        reserve_gold))
    if not usable:
        raise BudgetTooSmall(f"{task}: no MoreHopQA row of {morehopqa_path} fits {budget} tokens with its gold "
                             f"documents alone: raise the length (length=..., max_seq_length)")
    return usable


def _bare_prompt(row: QaRow) -> str:
    context = "\n\n".join(_doc(d + 1, para) for d, para in enumerate(row.gold))
    return fill_template(TEMPLATE, context, [], query=row.question).input


def generate_sample(p: QaParams, index: int, *, counter: TokenCounter, budget: int, seed: int, task: str,
                    morehopqa_path: str | Path, reserve_gold: bool = True, rows_order: tuple[int, ...] | None = None):
    path = str(Path(morehopqa_path).resolve())
    rows, _pool = load_rows(path)
    if rows_order is None:
        rows_order = row_order(p, counter=counter, budget=budget, seed=seed, task=task, morehopqa_path=path,
                               reserve_gold=reserve_gold)
    ranker = _ranker(path)
    last_error = None
    for attempt in range(len(rows_order)):
        row = rows[rows_order[(index + attempt) % len(rows_order)]]
        try:
            return _fit_row(p, row, ranker, index, counter=counter, budget=budget, seed=seed, task=task,
                            reserve_gold=reserve_gold)
        except BudgetTooSmall as e:  # the shuffled numbering cost a token more than the row check saw: next row
            last_error = e
    raise BudgetTooSmall(f"{task}: no MoreHopQA row fits {budget} tokens ({last_error})")


def _fit_row(p: QaParams, row: QaRow, ranker: DistractorRanker, index: int, *, counter: TokenCounter, budget: int,
             seed: int, task: str, reserve_gold: bool):
    gold_titles = {g.title for g in row.gold}
    distractors = ranker.ranked(row.question, gold_titles, derive_rng(seed, task, index, "distractors"))
    support = set(row.support)

    def render(chosen: list[int]):
        docs = list(row.gold) + [distractors[i] for i in chosen]
        derive_rng(seed, task, index, "order", len(chosen)).shuffle(docs)
        ctx = ContextBuilder("\n\n")
        for d, para in enumerate(docs):
            head = f"Document {d + 1}:\n{para.title}\n"
            start = ctx.add(head + para.text) + len(head)
            for si, sent in enumerate(para.sentences):
                if (para.title, si) in support and para.title in gold_titles and sent.strip():
                    off = start + para.starts[si]
                    lead = len(sent) - len(sent.lstrip())
                    ctx.mark(off + lead, off + lead + len(sent.strip()), sent.strip(), si, title=para.title,
                             doc_index=d, document_number=d + 1, hop=row.hops.get((para.title, si)))
        return fill_template(TEMPLATE, ctx.text(), ctx.evidence, query=row.question)

    # The printed document number varies with the shuffle; a two-digit stand-in keeps the estimate close.
    costs = UnitCosts(counter, lambda i: "\n\n" + _doc(10, distractors[i]), len(distractors), chunk=16)
    # Whole documents are coarse units: skip one that does not fit and try the next (any document may fill the end).
    # Upstream's rule: input + answer prefix + tokens_to_generate <= max_seq_length.
    fit = fit_units(render, lambda pr: pr.input + ANSWER_PREFIX, costs,
                    input_budget(counter, budget, ANSWER_PREFIX, [row.answer], p.tokens_to_generate, reserve_gold),
                    counter, lookahead=len(distractors))
    return fit, [row.answer], ANSWER_PREFIX
