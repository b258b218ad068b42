"""`mrtpo blocks preview` and `mrtpo blocks lint`: see every block of every reward, and lint them.

preview TASK [--data PATH] [--responses FILE] [-o KEY=VALUE ...] [-n N] [--json | --jsonl]
    For each example and response: P0, each reward's score, feedback and block, the contexts
    P_all and P_without_k (as what differs), and the lint's findings. Without --responses,
    two responses per example: the reference and a corrupted copy of it.
lint TASK [--data PATH] [--responses FILE] [-o KEY=VALUE ...] [-n N] [--json]
    Lints a whole dataset (progress bar on stderr), prints a summary by rule with example
    locations, and exits 1 when anything is found (0 when clean), so CI can run it.

-o/--task-option KEY=VALUE goes to the task's constructor, as in `mrtpo eval` and `mrtpo train`
(e.g. `-o skip_unsupported=true` for instruct data with instruction ids it has no checker for).
"""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from mrtpo.commands.options import TaskOptions, parse_task_options

TaskArg = Annotated[str, typer.Argument(help="Task name (see `mrtpo tasks ls`).")]
DataOpt = Annotated[Optional[str], typer.Option(
    "--data", help="Dataset path; default: the task's bundled sample.")]
ResponsesOpt = Annotated[Optional[str], typer.Option(
    "--responses", help='JSONL of {"id": <example id>, "response": <text>} rows; default: the '
                        "reference and a corrupted copy of it.")]
StyleOpt = Annotated[Optional[bool], typer.Option(
    "--rich/--plain", help="Rich tables or plain text; default: rich in a terminal, plain when piped.")]


def _load(task_name: str, data: str | None, responses: str | None, limit: int | None,
          options: list[str] | None = None):
    """Task (built with the -o options), examples and responses, or a clear error and exit 2."""
    from mrtpo.blocks.samples import ResponsesFileError, read_responses
    from mrtpo.tasks import get_task

    kwargs = parse_task_options(options)  # a malformed KEY=VALUE is a usage error (exit 2)
    from mrtpo.tasks.contract import USER_CODE_ERRORS

    try:
        task = get_task(task_name, **kwargs)
    except USER_CODE_ERRORS as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    try:
        examples = task.load(data)
    except USER_CODE_ERRORS as exc:  # data errors name file, row and field themselves
        where = data or "the bundled sample"
        typer.echo(f"error: could not load {where} for task {task_name!r}: {exc}", err=True)
        raise typer.Exit(2)
    resp = None
    if responses is not None:
        try:
            resp = read_responses(responses, examples)
        except ResponsesFileError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2)
        examples = [e for e in examples if e.id in resp]
    if limit is not None:
        examples = examples[:limit]
    if not examples:
        typer.echo(f"error: no examples to show (data: {data or 'bundled sample'})", err=True)
        raise typer.Exit(2)
    return task, examples, resp


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
        if as_jsonl:
            for rec in preview(t, examples, resp):
                typer.echo(dumps(rec))
            return
        if as_json:
            typer.echo(dumps(preview_document(list(preview(t, examples, resp)), t.name)))
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
    ) -> None:
        """Lint every block of a dataset; exit 1 when any rule is broken."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from mrtpo.blocks.lint import lint_task
        from mrtpo.blocks.show import report_plain, report_rich

        t, examples, resp = _load(task, data, responses, n, task_options)
        err_console, _ = _console(None, stderr=True)
        with Progress(TextColumn("linting blocks"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err_console, transient=True,
                      disable=not err_console.is_terminal) as bar:
            job = bar.add_task("lint", total=len(examples))
            report = lint_task(t, examples, resp, progress=lambda k: bar.advance(job, k))
        console, use_rich = _console(style)
        if as_json:
            from mrtpo.commands.jsonout import lint_document
            from mrtpo.textio import strict_json as dumps

            typer.echo(dumps(lint_document(report, t.name)))
        elif use_rich:
            report_rich(report, t.name, console, max_per_rule)
        else:
            typer.echo(report_plain(report, t.name, max_per_rule), nl=False)
        if not err_console.is_terminal:
            typer.echo(f"linted {report.examples} examples", err=True)
        raise typer.Exit(1 if report.findings else 0)

    app.add_typer(blocks_app, name="blocks")

