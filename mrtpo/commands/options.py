"""`-o/--task-option KEY=VALUE`: the one way every command passes settings to a task's constructor.

`mrtpo eval`, `mrtpo credit`, `mrtpo train` and `mrtpo blocks preview|lint` all declare the
option as `TaskOptions` and read it with `parse_task_options`, so a value means the same thing
whichever command it is given to (the task error hints say `-o skip_unsupported=true`).
"""
from __future__ import annotations

import json
from typing import Annotated, Any, Optional

import typer

FLAG = "--task-option"
HELP = ("KEY=VALUE for the task's constructor, repeatable (value read as JSON if it parses, "
        "true/false/none in any case, else a string), e.g. -o think=true -o skip_unsupported=true.")

TaskOptions = Annotated[Optional[list[str]], typer.Option(FLAG, "-o", help=HELP)]

_WORDS = {"true": True, "false": False, "none": None, "null": None}


def parse_task_value(raw: str) -> Any:
    """One value: JSON (numbers, lists, objects, quoted strings), then true/false/none in any
    case (so Python's `True`, as the tasks' own hints spell it, is a bool, not the truthy
    string "False"), else the text as it is (paths, names)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        pass
    word = raw.strip().lower()
    return _WORDS[word] if word in _WORDS else raw


def parse_task_options(items: list[str] | None, flag: str = FLAG) -> dict[str, Any]:
    """["think=true", "mode=set"] -> {"think": True, "mode": "set"}; a later KEY wins.

    A malformed item raises typer.BadParameter naming `flag`, which typer shows as a usage
    error (exit 2)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise typer.BadParameter(f"{item!r}: write KEY=VALUE, e.g. think=true", param_hint=flag)
        out[key.strip()] = parse_task_value(value)
    return out
