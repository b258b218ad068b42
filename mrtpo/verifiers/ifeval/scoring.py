"""Strict and loose scoring of one instruction, and IFEval's accuracies over a set of rows."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from mrtpo.verifiers.ifeval.registry import get_instruction, normalize_kwargs

#: Longest response the checkers read (characters). A longer one is not followed, with feedback
#: saying so: it cannot come from a trainer or an evaluation run (50,000 characters is over
#: 10,000 tokens, far past any `max_new_tokens` used with these benchmarks; IFEval's official
#: GPT-4 responses are at most 4,490 characters), and the sentence and word tokenizers, though
#: linear, take seconds per call beyond it. See data_cards/ifeval.md.
MAX_RESPONSE_CHARS = 50_000

_VARIANT_NAMES = (
    "as written", "with '*' removed", "without its first line", "without its last line",
    "without its first and last lines", "without its first line and '*'",
    "without its last line and '*'", "without its first and last lines and '*'",
)


def loose_variants(response: str) -> list[str]:
    """IFEval's eight loose-mode variants of `response`, in the official order."""
    lines = response.split("\n")
    first = "\n".join(lines[1:]).strip()
    last = "\n".join(lines[:-1]).strip()
    both = "\n".join(lines[1:-1]).strip()
    return [response, response.replace("*", ""), first, last, both,
            first.replace("*", ""), last.replace("*", ""), both.replace("*", "")]


def _strict(ins, kwargs: dict, response: str, prompt: str) -> tuple[bool, str]:
    if not response.strip():
        return False, "the response is empty"
    return ins.check(response, kwargs, prompt)


def verify(instruction_id: str, kwargs: dict | None, response: str, prompt: str = "",
           loose: bool = False) -> tuple[bool, str]:
    """(followed, feedback) for one instruction; never raises on model output.

    Raises `UnsupportedInstruction` / `ValueError` for an unknown id or bad kwargs (data
    errors, which loading reports first).
    """
    ins = get_instruction(instruction_id)
    kw = normalize_kwargs(instruction_id, kwargs)
    if not isinstance(response, str):
        return False, f"the response is {type(response).__name__}, not text"
    if len(response) > MAX_RESPONSE_CHARS:
        return False, (f"the response is {len(response):,} characters long, over the "
                       f"{MAX_RESPONSE_CHARS:,} the checkers read")
    ok, feedback = _strict(ins, kw, response, prompt)
    if ok or not loose:
        return ok, feedback
    tried = {response}  # a variant equal to one already checked fails again: checks are pure
    for name, variant in zip(_VARIANT_NAMES[1:], loose_variants(response)[1:]):
        if variant in tried:
            continue
        tried.add(variant)
        if _strict(ins, kw, variant, prompt)[0]:
            return True, f"followed by the response {name} (loose mode); as written: {feedback}"
    return False, feedback


def check(instruction_id: str, kwargs: dict | None, response: str, prompt: str = "",
          loose: bool = False) -> bool:
    """True when `response` follows the instruction (IFEval semantics, strict or loose)."""
    return verify(instruction_id, kwargs, response, prompt, loose)[0]


def describe(instruction_id: str, kwargs: dict | None) -> str:
    """The benchmark's own sentence stating this instruction (its `build_description` text)."""
    return get_instruction(instruction_id).describe(normalize_kwargs(instruction_id, kwargs))


@dataclass
class Evaluation:
    """Per-instruction results and IFEval's four accuracies over a set of prompts."""

    strict: list[list[bool]] = field(default_factory=list)
    loose: list[list[bool]] = field(default_factory=list)

    @staticmethod
    def _prompt_acc(results: list[list[bool]]) -> float:
        return sum(all(r) for r in results) / len(results) if results else float("nan")

    @staticmethod
    def _inst_acc(results: list[list[bool]]) -> float:
        flat = [x for r in results for x in r]
        return sum(flat) / len(flat) if flat else float("nan")

    @property
    def prompt_strict(self) -> float:
        return self._prompt_acc(self.strict)

    @property
    def inst_strict(self) -> float:
        return self._inst_acc(self.strict)

    @property
    def prompt_loose(self) -> float:
        return self._prompt_acc(self.loose)

    @property
    def inst_loose(self) -> float:
        return self._inst_acc(self.loose)

    def summary(self) -> dict[str, float]:
        return {"prompt_level_strict_acc": self.prompt_strict, "inst_level_strict_acc": self.inst_strict,
                "prompt_level_loose_acc": self.prompt_loose, "inst_level_loose_acc": self.inst_loose}


def evaluate(rows: Iterable[tuple[Sequence[str], Sequence[dict], str, str]]) -> Evaluation:
    """Score `(instruction_ids, kwargs_list, prompt, response)` rows, strict and loose."""
    ev = Evaluation()
    for ids, kwargs_list, prompt, response in rows:
        ev.strict.append([check(i, k, response, prompt) for i, k in zip(ids, kwargs_list)])
        ev.loose.append([check(i, k, response, prompt, loose=True) for i, k in zip(ids, kwargs_list)])
    return ev
