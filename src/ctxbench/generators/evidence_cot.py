"""``generator=evidence_cot``: a labelled synthetic chain of thought written from the data's own evidence spans, so the
two-stage protocol of the FlashTrace paper (ICML 2026; sampling stage -> CoT cache -> attribution) runs offline on
every RULER task (docs/sampling.md#evidence_cot).

For a row with ``metadata.needle_spans`` (RULER needles, variable-tracking links, supporting sentences) the response is
the evidence sentences restated in the order they appear in the context, one per line, then the answer sentence in
``\\box{}``: the gold continuation (answer prefix and outputs, as the RULER loader's target) as one sentence. The
sampling stage then parses, judges and attaches spans as for any generation, so the cached target is
``<evidence sentences>\\n<answer sentence>``: the sink is the answer sentence's tokens, the thinking span everything
before. No model runs; the cache's settings record ``generator: evidence_cot``, and the report's caption says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from ctxbench.datasets.ruler_gen.common import gold_target
from ctxbench.core.errors import ExampleRefused
from ctxbench.generators.base import Generation, GenerationRequest, Generator


def evidence_sentences(prompt: str, needle_spans: list) -> list[str]:
    """The text of each evidence span (``[start, end)`` in the prompt's characters), stripped, in context order."""
    spans = sorted((int(ns["span"][0]), int(ns["span"][1])) for ns in needle_spans)
    return [t for t in (prompt[s:e].strip() for s, e in spans) if t]


def answer_sentence(answer_prefix: str, outputs: list[str]) -> str:
    """The gold continuation as one sentence: stripped, with a full stop unless it ends in punctuation already."""
    text = gold_target(answer_prefix, outputs)[0].strip()
    return text if text[-1:] in ".!?" else text + "."


@dataclass
class EvidenceCoTGenerator(Generator):
    """``joiner``: what separates the restated evidence sentences (a line break: each stays a sentence of its own)."""

    name: ClassVar[str] = "evidence_cot"
    joiner: str = "\n"

    def check(self, examples: list, dataset: str) -> None:
        if not any(e.metadata.get("needle_spans") for e in examples):
            raise ExampleRefused(f"generator evidence_cot writes its chain of thought from evidence spans "
                                 f"(metadata.needle_spans, RULER data); dataset {dataset!r} has none")

    def response(self, req: GenerationRequest) -> tuple[Optional[str], Optional[str]]:
        """(text, None), or (None, why not) for a row this generator cannot write."""
        row = req.row
        md = row.metadata if row is not None else {}
        if row is None:
            return None, "evidence_cot: the request carries no dataset row"
        if not md.get("needle_spans"):
            return None, f"evidence_cot: example {req.key!r} has no evidence spans (metadata.needle_spans)"
        if not md.get("outputs"):
            return None, f"evidence_cot: example {req.key!r} has no answer (metadata.outputs)"
        thinking = self.joiner.join(evidence_sentences(row.prompt, md["needle_spans"]))
        if not thinking:
            return None, f"evidence_cot: example {req.key!r}: its evidence spans are blank"
        answer = answer_sentence(md.get("answer_prefix", ""), list(md["outputs"]))
        return thinking + "\n\\box{" + answer + "}", None

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        out = []
        for req in requests:
            text, error = self.response(req)
            out.append(Generation(req.key, error=error) if error else
                       Generation(req.key, text=text, finish_reason="evidence_cot"))
        return out
