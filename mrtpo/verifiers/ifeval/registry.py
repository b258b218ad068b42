"""The instruction registry: id -> checker, description template and accepted kwargs.

Each instruction is a pure `check(response, kwargs, prompt) -> (followed, feedback)` plus the
sentence template its source benchmark uses to state it (`describe(kwargs)`, IFEval's and
IFBench's `build_description` text, used to find a constraint's sentence in a prompt and to
write one where a dataset has none). Kwargs are validated and normalised once, when data is
loaded (`normalize_kwargs`): unused keys (None) are dropped, whole floats become ints, and a
missing or malformed kwarg raises `ValueError` saying which and what is expected. Checkers
then never raise on model output. The table itself and `register` are in `instruction.py`,
which the checker modules import; this module imports each of them.
"""
from __future__ import annotations

import difflib
import re
from typing import Any

# every checker module: importing one registers its instructions into REGISTRY
from mrtpo.verifiers.ifeval.ifbench_checks import IDS as IFBENCH_IDS
from mrtpo.verifiers.ifeval.ifeval_checks import IDS as IFEVAL_IDS
from mrtpo.verifiers.ifeval.iftrain_checks import IDS as IFTRAIN_IDS
from mrtpo.verifiers.ifeval.instruction import REGISTRY, Instruction, Source

CHECKED_IDS = IFEVAL_IDS + IFBENCH_IDS + IFTRAIN_IDS  # every registered instruction, by module


def supported_ids(source: Source | None = None) -> list[str]:
    """Instruction ids with a checker, sorted; `source` restricts to one benchmark."""
    return sorted(i for i in CHECKED_IDS if source is None or REGISTRY[i].source == source)


class UnsupportedInstruction(ValueError):
    """A dataset names an instruction id with no checker here."""


def get_instruction(instruction_id: str) -> Instruction:
    try:
        return REGISTRY[instruction_id]
    except KeyError:
        close = difflib.get_close_matches(instruction_id, REGISTRY, n=3, cutoff=0.6)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise UnsupportedInstruction(
            f"unsupported instruction id {instruction_id!r}.{hint} Supported ids "
            f"({len(REGISTRY)}): {', '.join(sorted(REGISTRY))}"
        ) from None


def _coerce(name: str, value: Any, typ: type, instruction_id: str) -> Any:
    where = f"{instruction_id}: kwarg {name!r}"
    if typ is int:
        if isinstance(value, bool):
            raise ValueError(f"{where} must be an integer, got {value!r}")
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value.strip())
        if not isinstance(value, int):
            raise ValueError(f"{where} must be an integer, got {value!r}")
        return value
    if typ is float:  # a number; whole values stay ints so descriptions read "27%", not "27.0%"
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise ValueError(f"{where} must be a number, got {value!r}") from None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value) if float(value).is_integer() else float(value)
        raise ValueError(f"{where} must be a number, got {value!r}")
    if typ is list:
        if isinstance(value, str):
            return [value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{where} must be a list of strings, got {value!r}")
        return list(value)
    if typ is str:
        if not isinstance(value, str):
            raise ValueError(f"{where} must be a string, got {value!r}")
        return value
    return value


def normalize_kwargs(instruction_id: str, kwargs: dict | None) -> dict:
    """Validated kwargs for `instruction_id`: None-valued keys dropped, whole floats made ints.

    Raises `UnsupportedInstruction` for an unknown id and `ValueError` for a missing,
    mistyped or out-of-range kwarg (a data error, reported when the data is loaded).
    """
    ins = get_instruction(instruction_id)
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise ValueError(f"{instruction_id}: kwargs must be an object, got {type(kwargs).__name__}")
    out: dict[str, Any] = {}
    accepted = set(ins.required) | set(ins.optional)
    for name, value in kwargs.items():
        if value is None or (isinstance(value, (str, list)) and not value and name not in ins.required):
            continue  # benchmark rows carry every kwarg key, None for unused ones
        if name not in accepted:
            continue  # extra keys (e.g. IF-RLVR carries a shared kwargs schema) are ignored
        typ = ins.types.get(name, str)
        out[name] = _coerce(name, value, typ, instruction_id)
        if name in ins.choices and out[name] not in ins.choices[name]:
            raise ValueError(f"{instruction_id}: kwarg {name!r} must be one of "
                             f"{list(ins.choices[name])}, got {out[name]!r}")
    for name in ins.regex:
        for pattern in ([out[name]] if isinstance(out.get(name), str) else out.get(name, [])):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{instruction_id}: kwarg {name!r} is used as a regular expression "
                                 f"(as in IFEval) and {pattern!r} is not one: {exc}") from None
    missing = [k for k in ins.required if k not in out]
    if missing:
        raise ValueError(f"{instruction_id}: missing kwarg(s) {missing}; it needs "
                         f"{list(ins.required)}" + (f" (optional: {list(ins.optional)})" if ins.optional else ""))
    if ins.validate is not None:
        try:
            ins.validate(out)
        except ValueError as exc:
            raise ValueError(f"{instruction_id}: {exc}") from None
    return out
