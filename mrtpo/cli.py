"""The `mrtpo` command line: a thin typer app. Each command group lives in mrtpo/commands/
and registers itself here; commands parse arguments, call library functions and print."""
from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="mrtpo",
    help="Multi-reward RL for language models: each reward's credit on its relevant tokens.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each module defines `register(app)`. Imported here, at start-up, but each keeps its heavy
# imports (torch, transformers) inside its command functions so `mrtpo --help` stays fast.
COMMAND_MODULES = [
    "mrtpo.commands.tasks",
    "mrtpo.commands.model",
    "mrtpo.commands.eval",
    "mrtpo.commands.blocks",
    "mrtpo.commands.train",
    "mrtpo.commands.credit",
    "mrtpo.commands.probe",
]

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:  # `python -m mrtpo`
    app()
