"""One instruction type (`Instruction`) and the table the checker modules register into.

The checker modules (ifeval_checks, ifbench_checks, iftrain_checks) import `register` from here
and fill `REGISTRY` when they are imported; each ends with the ids it registered
(`registered_since`), which `mrtpo.verifiers.ifeval.registry` imports from all three (an explicit
list, so a lookup never misses one) before it answers lookups. Kept apart so that the checkers
never import the module that imports them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal

CheckFn = Callable[[str, dict, str], "tuple[bool, str]"]
Source = Literal["ifeval", "ifbench", "iftrain"]

RELATIONS = ("less than", "at least")


@dataclass(frozen=True)
class Instruction:
    """One verifiable constraint type.

    `required`/`optional` name the kwargs `check` reads; `types` maps a kwarg to int, str,
    list or float so loading can coerce and reject bad rows; `uses_prompt` marks checkers that
    read the prompt (IFEval's repeat_prompt reads `prompt_to_repeat` instead).
    """

    id: str
    check: CheckFn
    describe: Callable[[dict], str]
    source: Source
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    types: dict[str, type] = field(default_factory=dict)
    choices: dict[str, tuple] = field(default_factory=dict)
    regex: tuple[str, ...] = ()  # kwargs the checker uses as regular expressions
    validate: Callable[[dict], None] | None = None  # further checks on the normalised kwargs


REGISTRY: dict[str, Instruction] = {}


def register(id: str, *, source: Source, describe: Callable[[dict], str],
             required: tuple[str, ...] = (), optional: tuple[str, ...] = (),
             types: dict[str, type] | None = None, choices: dict[str, tuple] | None = None,
             regex: tuple[str, ...] = (), validate: Callable[[dict], None] | None = None):
    """Decorator registering a checker function under `id`.

    `validate(kwargs)` raises ValueError for kwargs the types alone do not rule out (an empty
    keyword, a sentence index below 1); `normalize_kwargs` prefixes the instruction id.
    """

    def deco(fn: CheckFn) -> CheckFn:
        if id in REGISTRY:
            raise ValueError(f"instruction {id!r} is registered twice")
        REGISTRY[id] = Instruction(id, fn, describe, source, required, optional,
                                   dict(types or {}), dict(choices or {}), tuple(regex), validate)
        return fn

    return deco


def registered_since(count: int) -> tuple[str, ...]:
    """The ids registered after the first `count`: a checker module notes `len(REGISTRY)` before
    its first `register` and ends with the ids it added (the table keeps registration order)."""
    return tuple(REGISTRY)[count:]
