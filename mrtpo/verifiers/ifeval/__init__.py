"""Instruction-following checkers: IFEval's 25 instructions and IFBench's out-of-distribution ones.

    check(instruction_id, kwargs, response, prompt="", loose=False) -> bool
    verify(instruction_id, kwargs, response, prompt="", loose=False) -> (bool, feedback)

Strict mode checks the response as it is; loose mode (IFEval's `test_instruction_following_loose`)
counts an instruction as followed when any of eight variants passes: the response, without its
first line, without its last line, without both, each also with every `*` removed. An empty
(whitespace-only) response or variant fails every check. No NLTK data and no network are needed;
language detection is seeded (langdetect is random otherwise).
"""
from mrtpo.verifiers.ifeval.instruction import REGISTRY, Instruction
from mrtpo.verifiers.ifeval.registry import (
    UnsupportedInstruction,
    get_instruction,
    normalize_kwargs,
    supported_ids,
)
from mrtpo.verifiers.ifeval.scoring import (
    Evaluation,
    check,
    describe,
    evaluate,
    loose_variants,
    verify,
)

__all__ = [
    "REGISTRY", "Evaluation", "Instruction", "UnsupportedInstruction", "check", "describe",
    "evaluate", "get_instruction", "loose_variants", "normalize_kwargs", "supported_ids", "verify",
]
