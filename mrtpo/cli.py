"""The `mrtpo` command line: a thin typer app. Each command group lives in mrtpo/commands/
and registers itself here; commands parse arguments, call library functions and print."""
from __future__ import annotations

import importlib

import typer
from typer.core import TyperGroup


class _Root(TyperGroup):
    """The root command group: a command given --json or --jsonl runs with standard output
    kept for its documents (mrtpo.commands.jsonout.documents_only: what else writes to stdout,
    a task's code that prints, goes to stderr). One place for every command."""

    def invoke(self, ctx):
        from mrtpo.commands.jsonout import DOCUMENT_FLAGS, documents_only

        args = [*getattr(ctx, "_protected_args", []), *ctx.args]
        if any(a in DOCUMENT_FLAGS for a in args):
            with documents_only():
                return super().invoke(ctx)
        return super().invoke(ctx)


class _App(typer.Typer):
    """The app; called as a program (the `mrtpo` console script calls `app()`) it runs through
    `main`, so a failing standard output is one line whichever way mrtpo was started."""

    def __call__(self, *args, **kwargs):
        if args or kwargs:  # called with arguments: by code that wants the command's result
            return super().__call__(*args, **kwargs)
        return main()


app = _App(
    cls=_Root,
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
    "mrtpo.commands.export",
    "mrtpo.commands.probe",
]

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:  # `python -m mrtpo` and the `mrtpo` console script
    """Run the app; a standard output that cannot be written (a full disk: `> /dev/full`, a
    quota, an I/O error) is one line on stderr and exit status 1, not a traceback from the
    first print (issue 40, item 13). A closed pipe already ends quietly (click)."""
    import sys

    out = _WatchedStdout(sys.stdout)
    sys.stdout = out
    try:
        typer.Typer.__call__(app)
    except SystemExit as done:
        code = done.code
    except OSError:
        if out.failure is None:
            raise
        code = _stdout_failed(out.failure)
    else:  # pragma: no cover (typer's standalone mode always exits)
        code = 0
    try:
        out.flush()  # what is still buffered: a failure here would be "Exception ignored" at exit
    except OSError as exc:
        code = _stdout_failed(exc)
    sys.exit(code)


class _WatchedStdout:
    """sys.stdout as it is, remembering the first OSError a write or flush to it raised, so
    `main` tells a failing standard output from any other OSError."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self.failure: OSError | None = None

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as exc:
            self.failure = self.failure or exc
            raise

    def flush(self):
        try:
            return self._stream.flush()
        except OSError as exc:
            self.failure = self.failure or exc
            raise

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _stdout_failed(exc: OSError) -> int:
    """Say on stderr that stdout could not be written, drop what is buffered (stdout points to
    /dev/null from here, so the interpreter's last flush cannot fail again), and give status 1."""
    import os
    import sys

    try:
        sys.stderr.write(f"error: cannot write the output to standard output ({exc.strerror or exc}); "
                         "free space where it goes, or send it elsewhere\n")
        sys.stderr.flush()
    except OSError:
        pass
    stream = getattr(sys.stdout, "_stream", sys.stdout)
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass
    sys.stdout = stream
    return 1
