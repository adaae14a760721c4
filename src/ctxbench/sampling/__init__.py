"""The parts of the sampling stage (docs/sampling.md): FlashTrace's prompts, the boxed-answer format check, the judges,
and span attachment (a judged-correct generation becomes a CachedExample)."""

from ctxbench.sampling.attach import attach_spans, build_target
from ctxbench.boxed import REJECTION_REASONS, BoxedSplit, Rejection, split_boxed_generation
from ctxbench.sampling.judges import Judge, JudgeItem, ModelJudge, OpenAIJudge, RuleJudge, Verdict, normalize_answer
from ctxbench.sampling.prompts import (GENERATION_SYSTEM_PROMPT, JUDGE_SYSTEM_PROMPT, judge_messages,
                                       parse_judge_response)

__all__ = ["attach_spans", "build_target", "REJECTION_REASONS", "BoxedSplit", "Rejection", "split_boxed_generation",
           "Judge", "JudgeItem", "ModelJudge", "OpenAIJudge", "RuleJudge", "Verdict", "normalize_answer",
           "GENERATION_SYSTEM_PROMPT", "JUDGE_SYSTEM_PROMPT", "judge_messages", "parse_judge_response"]
