"""`mrtpo blocks preview` and `mrtpo blocks lint`: see every block of every reward, and lint them.

preview TASK [--data PATH] [--responses FILE] [-o KEY=VALUE ...] [-n N] [--json | --jsonl]
    For each example and response: P0, each reward's score, feedback and block, the contexts
    P_all and P_without_k (as what differs), and the lint's findings. Without --responses,
    two responses per example: the reference and a corrupted copy of it.
lint TASK [--data PATH] [--responses FILE] [-o KEY=VALUE ...] [-n N] [--json]
    Lints a whole dataset (progress bar on stderr), prints a summary by rule with example
    locations, and exits 1 when anything is found (0 when clean), so CI can run it. The data is
    read as the lint goes (`Task.iter_examples`) and the report is bounded (mrtpo.blocks.lint),
    so memory does not grow with the number of rows; what the report leaves out, it says.

-o/--task-option KEY=VALUE goes to the task's constructor, as in `mrtpo eval` and `mrtpo train`
(e.g. `-o skip_unsupported=true` for instruct data with instruction ids it has no checker for).
"""
from __future__ import annotations

import contextlib
from typing import Annotated, Optional

import typer

from mrtpo.commands.jsonout import emit
from mrtpo.commands.options import TaskOptions, VerifyTimeout, parse_task_options, task_code
from mrtpo.tasks.runner import DEFAULT_TIMEOUT

TaskArg = Annotated[str, typer.Argument(help="Task name (see `mrtpo tasks ls`).")]
DataOpt = Annotated[Optional[str], typer.Option(
    "--data", help="Dataset path; default: the task's bundled sample.")]
ResponsesOpt = Annotated[Optional[str], typer.Option(
    "--responses", help='JSONL of {"id": <example id>, "response": <text>} rows; default: the '
                        "reference and a corrupted copy of it.")]
StyleOpt = Annotated[Optional[bool], typer.Option(
    "--rich/--plain", help="Rich tables or plain text; default: rich in a terminal, plain when piped.")]


def _task(task_name: str, options: list[str] | None):
    """The task, built with the -o options, or a clear error and exit 2."""
    from mrtpo.tasks import get_task
    from mrtpo.tasks.contract import USER_CODE_ERRORS

    kwargs = parse_task_options(options)  # a malformed KEY=VALUE is a usage error (exit 2)
    try:
        return get_task(task_name, **kwargs)
    except USER_CODE_ERRORS as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)


def _unreadable(where: str, task_name: str, exc: BaseException) -> typer.Exit:
    """Say that the data could not be read (the message names file, row and field) and exit 2."""
    typer.echo(f"error: could not load {where} for task {task_name!r}: {exc}", err=True)
    return typer.Exit(2)


def _responses_file(responses: str | None):
    """The --responses file (None without one), or a clear error and exit 2."""
    from mrtpo.blocks.samples import ResponsesFile, ResponsesFileError

    if responses is None:
        return None
    try:
        return ResponsesFile.read(responses)
    except ResponsesFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)


def _no_examples(data: str | None) -> typer.Exit:
    typer.echo(f"error: no examples to show (data: {data or 'bundled sample'})", err=True)
    return typer.Exit(2)


def _load(task_name: str, data: str | None, responses: str | None, limit: int,
          options: list[str] | None = None):
    """Task (built with the -o options), its first `limit` examples (those with responses when
    a --responses file is given) and the responses, or a clear error and exit 2. The data is
    read only as far as those examples (and, with responses, until each response's example has
    been met), one row at a time, as `mrtpo blocks lint` reads it."""
    task = _task(task_name, options)
    resp = _responses_file(responses)  # its ids are checked against the data below
    stream = _Examples(task, data, resp, limit)
    with _reading(data, task_name):
        examples = list(stream)
        stream.check_response_ids()
    if not examples:
        raise _no_examples(data)
    return task, examples, resp.by_id if resp is not None else None


@contextlib.contextmanager
def _reading(data: str | None, task_name: str):
    """Reading `_Examples` and checking the responses' ids: a data error or a response for no
    example becomes its one-line error and exit 2 (for preview and lint alike)."""
    from mrtpo.blocks.samples import ResponsesFileError

    try:
        yield
    except _Unreadable as exc:
        raise _unreadable(data or "the bundled sample", task_name, exc)
    except ResponsesFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)


class _Unreadable(Exception):
    """The data's reader failed part-way through a stream (`_Examples`); the cause is chained."""


class _Examples:
    """The examples `mrtpo blocks lint` and `preview` read, one at a time (`stream_examples`): the ones
    with responses when a --responses file is given, the first `limit` of them with -n. An error
    of the reader becomes `_Unreadable`, told apart from the lint's own."""

    def __init__(self, task, data: str | None, resp, limit: int | None) -> None:
        from mrtpo.tasks.base import stream_examples

        self.stream = stream_examples(task, data)
        self.resp = resp
        self.limit = limit
        self.unseen = set(resp.by_id) if resp is not None else set()  # response ids not met yet
        self.sample: list[str] = []  # the first few ids of the data, for an error's example

    def _next(self):
        from mrtpo.tasks.contract import USER_CODE_ERRORS

        try:
            example = next(self.stream, None)
        except USER_CODE_ERRORS as exc:  # data errors name file, row and field themselves
            raise _Unreadable(str(exc)) from exc
        if example is not None:
            if len(self.sample) < 5:
                self.sample.append(example.id)
            self.unseen.discard(example.id)
        return example

    def __iter__(self):
        given = 0
        while self.limit is None or given < self.limit:
            example = self._next()
            if example is None:
                return
            if self.resp is None or example.id in self.resp.by_id:
                given += 1
                yield example

    def check_response_ids(self) -> None:
        """ResponsesFileError for a response whose id is no example's: the rest of the data is
        read (as it goes) only while some response's example has not been met."""
        if self.resp is None:
            return
        while self.unseen and self._next() is not None:
            pass
        if self.unseen:
            self.resp.check_ids(set(self.resp.by_id) - self.unseen, self.sample)


def _console(rich_style: bool | None, stderr: bool = False):
    from rich.console import Console

    console = Console(stderr=stderr, soft_wrap=False)
    use_rich = console.is_terminal if rich_style is None else rich_style
    if use_rich and not console.is_terminal:
        console = Console(stderr=stderr, force_terminal=True, width=160)
    return console, use_rich


def register(app: typer.Typer) -> None:
    blocks_app = typer.Typer(help="Preview and lint the blocks (Z_k) each reward writes.",
                             no_args_is_help=True)

    @blocks_app.command("preview")
    def preview_cmd(
        task: TaskArg,
        data: DataOpt = None,
        responses: ResponsesOpt = None,
        task_options: TaskOptions = None,
        n: Annotated[int, typer.Option("-n", "--num-examples", min=1,
                                       help="How many examples to show.")] = 3,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON object with every record "
                                                            "(schema mrtpo.blocks.preview/1).")] = False,
        as_jsonl: Annotated[bool, typer.Option("--jsonl", help="JSON Lines: one record per (example, "
                                                              "response) per line, for streaming.")] = False,
        style: StyleOpt = None,
        verify_timeout: VerifyTimeout = DEFAULT_TIMEOUT,
    ) -> None:
        """Show P0, each reward's score, feedback and block, the contexts and lint findings."""
        from mrtpo.blocks.preview import preview
        from mrtpo.blocks.show import record_plain, record_rich
        from mrtpo.commands.jsonout import preview_document
        from mrtpo.textio import strict_json as dumps

        if as_json and as_jsonl:
            typer.echo("error: give --json (one document) or --jsonl (one record per line), not both", err=True)
            raise typer.Exit(2)
        t, examples, resp = _load(task, data, responses, n, task_options)
        with task_code(t, verify_timeout):  # the task's code in a worker, with a deadline
            if as_jsonl:
                for rec in preview(t, examples, resp):
                    emit(dumps(rec))
                return
            if as_json:
                emit(dumps(preview_document(list(preview(t, examples, resp)), t.name)))
                return
            console, use_rich = _console(style)
            for rec in preview(t, examples, resp):
                if use_rich:
                    record_rich(rec, console)
                else:
                    typer.echo(record_plain(rec))

    @blocks_app.command("lint")
    def lint_cmd(
        task: TaskArg,
        data: DataOpt = None,
        responses: ResponsesOpt = None,
        task_options: TaskOptions = None,
        n: Annotated[Optional[int], typer.Option("-n", "--num-examples", min=1,
                                                 help="Lint only the first N examples.")] = None,
        max_per_rule: Annotated[int, typer.Option("--max-per-rule", min=1,
                                                  help="Locations listed per rule.")] = 10,
        style: StyleOpt = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: every finding and the "
                                                            "counts per rule (schema mrtpo.blocks.lint/1).")] = False,
        verify_timeout: VerifyTimeout = DEFAULT_TIMEOUT,
    ) -> None:
        """Lint every block of a dataset; exit 1 when any rule is broken."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from mrtpo.blocks.lint import lint_task
        from mrtpo.blocks.show import report_plain, report_rich

        t = _task(task, task_options)
        resp = _responses_file(responses)  # its ids are checked once the data has been read
        examples = _Examples(t, data, resp, n)  # read as the lint goes: one row in memory
        err_console, _ = _console(None, stderr=True)
        with _reading(data, task), task_code(t, verify_timeout):
            with Progress(TextColumn("linting blocks"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=err_console, transient=True,
                          disable=not err_console.is_terminal) as bar:
                job = bar.add_task("lint", total=None)
                report = lint_task(t, examples, resp.by_id if resp is not None else None,
                                   progress=lambda k: bar.advance(job, k))
            examples.check_response_ids()
        if not report.examples:
            raise _no_examples(data)
        console, use_rich = _console(style)
        if as_json:
            from mrtpo.commands.jsonout import lint_document
            from mrtpo.textio import strict_json as dumps

            emit(dumps(lint_document(report, t.name)))
        elif use_rich:
            report_rich(report, t.name, console, max_per_rule)
        else:
            typer.echo(report_plain(report, t.name, max_per_rule), nl=False)
        if not err_console.is_terminal:
            typer.echo(f"linted {report.examples} examples", err=True)
        raise typer.Exit(1 if report.total else 0)

    app.add_typer(blocks_app, name="blocks")

