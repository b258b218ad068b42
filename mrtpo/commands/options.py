"""`-o/--task-option KEY=VALUE`: the one way every command passes settings to a task's constructor.

`mrtpo eval`, `mrtpo credit`, `mrtpo train` and `mrtpo blocks preview|lint` all declare the
option as `TaskOptions` and read it with `parse_task_options`, so a value means the same thing
whichever command it is given to (the task error hints say `-o skip_unsupported=true`), and
the TRL launcher's `--task_args` reads values the same way. Names and types are checked where
every task is built (`mrtpo.tasks.get_task`, see mrtpo.tasks.options).
"""
from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from mrtpo.tasks.options import OptionSyntaxError, TaskOptionError, read_options

FLAG = "--task-option"
HELP = ("KEY=VALUE for the task's constructor, repeatable (the value read as a YAML scalar, as "
        "TRL's --task_args: true/false/yes/no, numbers, null, \\[lists], {maps}, else text; checked "
        "against the option's declared type), e.g. -o think=true -o skip_unsupported=true.")

TaskOptions = Annotated[Optional[list[str]], typer.Option(FLAG, "-o", help=HELP)]


def parse_task_options(items: list[str] | None, flag: str = FLAG) -> dict[str, Any]:
    """["think=true", "mode=set"] -> {"think": True, "mode": "set"}; a later KEY wins.

    A malformed item raises typer.BadParameter naming `flag`, which typer shows as a usage
    error (exit 2)."""
    try:
        return read_options(items)
    except OptionSyntaxError as exc:
        raise typer.BadParameter(f"{exc.item[:200]!r}: write KEY=VALUE, e.g. think=true", param_hint=flag) from None
    except TaskOptionError as exc:  # a value mrtpo's YAML reader refuses (an alias bomb, a repeated key)
        raise typer.BadParameter(str(exc), param_hint=flag) from None


VerifyTimeout = Annotated[float, typer.Option(
    "--verify-timeout", min=0.001, max=86400.0,
    help="Seconds one call into the task's code (a verifier, a block builder, reference) may take; "
         "a verifier past it scores its reward's floor ('timed out'), as in training.")]


def task_code(task, timeout: float):
    """The runner of `task`'s code for one command (mrtpo.tasks.runner): one worker, the
    deadline `timeout`; a context manager."""
    from mrtpo.tasks.runner import TaskRunner

    return TaskRunner(task, workers=1, timeout=timeout)
