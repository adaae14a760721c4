"""Context retrieval (docs/retrieval.md#context-retrieval): an attribution dataset whose examples carry evidence spans
(RULER ``metadata.needle_spans``) as retrieval data.

Per example: the corpus is the sentences of its context (``split_sentences`` of the prompt, the segmentation of
``attr_mask_indices``), the query is its question, and the sentences overlapping an evidence span are relevant
(relevance 1); a query searches only its own example's sentences (one group per example). The question is the last
non-empty line of the RULER input (the prompt without ``answer_prefix``), which is where every RULER template puts it.
The context starts where the evidence spans say (``span - context_span``); the sentences before it (the task
instruction) and from the question on are left out; any text between the context and the question (qa's repeated
instruction) stays in the corpus as non-relevant sentences. Document ids: ``<example id>#<sentence index>``, the index
counting every sentence of the prompt (so it matches ``attr_mask_indices``); query ids: the example ids.
"""

from __future__ import annotations

import logging
from typing import Sequence

from ctxbench.datasets.sentences import sentences_overlapping, split_sentences
from ctxbench.core.errors import ExampleRefused
from ctxbench.example import CachedExample
from ctxbench.retrieval.data import RetrievalSplit

log = logging.getLogger(__name__)

SPLIT = "context"


def question_span(example: CachedExample) -> tuple[int, int]:
    """``[start, end)`` of the question inside the prompt: the last non-empty line of the RULER input."""
    prompt, prefix = example.prompt, example.metadata.get("answer_prefix") or ""
    end = len(prompt) - len(prefix) if prefix and prompt.endswith(prefix) else len(prompt)
    body = prompt[:end].rstrip()
    start = body.rfind("\n") + 1
    lead = len(body[start:]) - len(body[start:].lstrip())
    return start + lead, len(body)


def context_start(needles: Sequence[dict]) -> int:
    """Where the context begins in the prompt: a needle's ``span`` start minus its ``context_span`` start (0 when
    the spans do not say)."""
    starts = {n["span"][0] - n["context_span"][0] for n in needles if n.get("context_span")}
    return min(starts) if starts else 0


def context_split(examples: Sequence[CachedExample], dataset: str) -> RetrievalSplit:
    """One split holding every example with evidence spans as its own group (module doc)."""
    corpus, queries, qrels, groups = [], [], {}, []
    skipped = 0
    for ex in examples:
        needles = ex.metadata.get("needle_spans")
        if not needles:
            skipped += 1
            continue
        q_start, q_end = question_span(ex)
        c_start = context_start(needles)
        sentences = split_sentences(ex.prompt)
        relevant = set(sentences_overlapping(sentences, [tuple(n["span"]) for n in needles]))
        qid = ex.example_id
        docs = []
        for i, (a, b) in enumerate(sentences):
            if a >= c_start and b <= q_start:
                docs.append(len(corpus))
                corpus.append({"id": f"{qid}#{i}", "title": "", "text": ex.prompt[a:b]})
        judged = {corpus[d]["id"]: 1 for d in docs if int(corpus[d]["id"].rsplit("#", 1)[1]) in relevant}
        if not judged:
            raise ExampleRefused(f"example {qid}: no context sentence overlaps its evidence spans")
        groups.append((docs, [len(queries)]))
        queries.append({"id": qid, "text": ex.prompt[q_start:q_end]})
        qrels[qid] = judged
    if not queries:
        raise ExampleRefused(f"dataset {dataset}: no example carries evidence spans (metadata.needle_spans); context "
                             f"retrieval needs them (RULER tasks have them)")
    if skipped:
        log.warning("context retrieval on %s: %d examples without evidence spans left out", dataset, skipped)
    return RetrievalSplit(dataset, SPLIT, corpus, queries, qrels, groups=groups)
