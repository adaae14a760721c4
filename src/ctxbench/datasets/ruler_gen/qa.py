"""Multi-document QA ``hotpotqa_long`` from MoreHopQA-format data (HotpotQA itself is not available offline).

Per sample one row: query = ``previous_question`` (the original multi-hop question), outputs = [``previous_answer``].
Gold documents = the row's ``context`` paragraphs (title, sentences; text = "".join(sentences), HotpotQA style), all
always present. Distractors = paragraphs of the other rows (distinct titles, none equal to a gold title), in a random
order per sample, added until the length budget is reached; then all documents are shuffled and printed as
"Document {i}:\\n{title}\\n{text}" joined by "\\n\\n".

Gold spans (``needle_spans``) = the supporting sentences: a HotpotQA-style ``supporting_facts`` list ([title, sentence
index] pairs) when the row has one; otherwise, for each step of ``question_decomposition`` with a
``paragraph_support_title``, the sentences of that paragraph that contain the step's answer (all of the paragraph's
sentences when none does: MoreHopQA keeps no sentence-level labels). A row whose gold documents alone exceed the budget
is skipped for the next row of the (seeded) row order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .common import ContextBuilder, derive_rng, fill_template
from .length import TokenCounter, UnitCosts, fit_units

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

    @property
    def text(self) -> str:
        return "".join(self.sentences)


@dataclass(frozen=True)
class QaRow:
    question: str
    answer: str
    gold: tuple[Paragraph, ...]
    support: tuple[tuple[str, int], ...]  # (title, sentence index)


def _support(row: dict, gold: tuple[Paragraph, ...]) -> tuple[tuple[str, int], ...]:
    by_title = {p.title: p for p in gold}
    if row.get("supporting_facts"):
        pairs = {(t, int(i)) for t, i in row["supporting_facts"] if t in by_title and int(i) < len(by_title[t].sentences)}
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
        rows.append(QaRow(str(q), str(a), gold, _support(r, gold)))
        for p in gold:
            pool.setdefault(p.title, p)  # first text of a title wins: deterministic
    return tuple(rows), tuple(pool[t] for t in sorted(pool))


def _doc(number: int, p: Paragraph) -> str:
    return f"Document {number}:\n{p.title}\n{p.text}"


def generate_sample(p: QaParams, index: int, *, counter: TokenCounter, budget: int, seed: int, task: str,
                    morehopqa_path: str | Path):
    rows, pool = load_rows(str(Path(morehopqa_path).resolve()))
    if not rows:
        raise ValueError(f"{morehopqa_path}: no rows")
    order = list(range(len(rows)))
    derive_rng(seed, task, "rows").shuffle(order)
    last_error = None
    for attempt in range(len(rows)):
        row = rows[order[(index + attempt) % len(rows)]]
        try:
            return _fit_row(row, pool, index, counter=counter, budget=budget, seed=seed, task=task)
        except ValueError as e:  # gold alone over budget: next row
            last_error = e
    raise ValueError(f"{task}: no MoreHopQA row fits {budget} tokens ({last_error})")


def _fit_row(row: QaRow, pool, index: int, *, counter: TokenCounter, budget: int, seed: int, task: str):
    gold_titles = {g.title for g in row.gold}
    distractors = [q for q in pool if q.title not in gold_titles]
    derive_rng(seed, task, index, "distractors").shuffle(distractors)
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
                    off = start + sum(len(s) for s in para.sentences[:si])
                    lead = len(sent) - len(sent.lstrip())
                    ctx.mark(off + lead, off + lead + len(sent.strip()), sent.strip(), si, title=para.title,
                             doc_index=d, document_number=d + 1)
        return fill_template(TEMPLATE, ctx.text(), ctx.evidence, query=row.question)

    # The printed document number varies with the shuffle; a two-digit stand-in keeps the estimate close.
    costs = UnitCosts(counter, lambda i: "\n\n" + _doc(10, distractors[i]), len(distractors), chunk=16)
    # Whole documents are coarse units: skip one that does not fit and try the next (any document may fill the end).
    fit = fit_units(render, lambda pr: pr.input, costs, budget, counter, lookahead=len(distractors))
    return fit, [row.answer], ANSWER_PREFIX
