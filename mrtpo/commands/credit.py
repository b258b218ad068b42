"""`mrtpo credit`: see which tokens each reward's credit went to.

    mrtpo credit runs/text2sql-gdpo-mrtpo-20261130 --step 20 --limit 4 --html credit.html
    mrtpo credit text2sql --model ./checkpoint --limit 3 --png first.png
    mrtpo credit instruct --model smollm2-135m --responses mine.jsonl

With a run directory it reads the completions the run logged (`completions.jsonl`); with a
task name it scores and replays responses now, with `--model` (each example's responses from
`--responses`, or the task's reference answer and a corrupted copy, credited as one group).
"""
from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from mrtpo.commands.jsonout import emit
from mrtpo.commands.options import FLAG, HELP, VerifyTimeout
from mrtpo.tasks.runner import DEFAULT_TIMEOUT


class Estimator(str, Enum):
    gdpo = "gdpo"
    grpo = "grpo"


def register(app: typer.Typer) -> None:
    @app.command("credit")
    def credit_cmd(
        target: Annotated[str, typer.Argument(metavar="RUN_DIR|TASK", help="A training run's directory (reads its completions.jsonl), or a task name to compute credit fresh with --model.")],
        step: Annotated[Optional[int], typer.Option("--step", min=1, help="Run: the logged step to show; default: the last one.")] = None,
        limit: Annotated[Optional[int], typer.Option("--limit", min=1, help="Run: show the first N completions of the step. Task: the first N examples.")] = None,
        html_out: Annotated[Optional[Path], typer.Option("--html", help="Also write one self-contained HTML page here.")] = None,
        png_out: Annotated[Optional[Path], typer.Option("--png", help="Also write a heatmap of one completion here (needs matplotlib: the 'plot' extra).")] = None,
        index: Annotated[int, typer.Option("--index", min=1, help="Which completion (of those shown, from 1) --png draws.")] = 1,
        model: Annotated[Optional[str], typer.Option("--model", help="Task: the policy to replay with (directory, hub id, built-in policy, or a run dir / checkpoint / adapter; default: the built-in default policy).")] = None,
        data: Annotated[Optional[str], typer.Option("--data", help="Task: dataset path; default: the task's bundled sample.")] = None,
        responses: Annotated[Optional[Path], typer.Option("--responses", help='Task: JSONL rows {"id": <example id>, "response": <text>} or {"id", "responses": [...]}; default: reference + corrupted copy.')] = None,
        task_options: Annotated[Optional[list[str]], typer.Option(FLAG, "-o", help="Task: " + HELP)] = None,
        estimator: Annotated[Estimator, typer.Option("--estimator", help="Task: credit over each example's responses with gdpo or grpo.")] = Estimator.gdpo,
        temperature: Annotated[float, typer.Option("--temperature", help="Task: divides the logits in the replay (as in training).")] = 1.0,
        device: Annotated[str, typer.Option("--device", help="Task: auto, cpu, cuda, cuda:1...")] = "auto",
        dtype: Annotated[str, typer.Option("--dtype", help="Task: auto, float32, bfloat16 or float16.")] = "auto",
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the summary table, not every completion.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: the records shown and the summary (schema in mrtpo/credit/text_view.py).")] = False,
        plain: Annotated[Optional[bool], typer.Option("--plain/--rich", help="Plain lines that read in a file, or the shaded table; default: plain when stdout is not a terminal.")] = None,
        verify_timeout: VerifyTimeout = DEFAULT_TIMEOUT,
    ) -> None:
        """See which tokens each reward's credit went to (a run's log, or fresh with --model).

        Per completion, one line per reward: its score, its credit, the response's tokens
        shaded by that reward's weight, and its block. Then, per reward and for the task, the
        share of tokens that carry 80% of the reward's distance.
        """
        from rich.console import Console

        from mrtpo.credit import terminal
        from mrtpo.credit.records import CreditError
        from mrtpo.textio import OutputPathError, check_writable, scrub_all

        console = Console()
        path = Path(target)
        if html_out is not None:  # before the work, not after it
            try:
                check_writable(html_out, "HTML page")
            except OutputPathError as exc:
                _fail(f"--html {exc}")
        try:
            if path.is_dir():
                for flag, value in (("--model", model), ("--data", data), ("--responses", responses),
                                    (FLAG, task_options)):
                    if value:
                        _fail(f"{flag} is for computing credit fresh for a task; {target} is a run directory")
                records, task_name, model_name, heading, note = _from_run(path, step, limit)
            else:
                if path.exists():
                    _fail(f"{target} is a file; give a run directory or a task name")
                if "/" in target or target.startswith("."):
                    _fail(f"{target}: no such run directory")
                if step is not None:
                    _fail("--step reads a run directory's log; with a task name, leave it out")
                if temperature <= 0:
                    _fail(f"--temperature must be > 0, got {temperature}")
                records, task_name, model_name, heading, note = _fresh(
                    target, model, data, responses, task_options or [], limit, estimator.value,
                    temperature, device, dtype, verify_timeout)
            if not records:
                _fail("no completions to show")
            records = scrub_all(records)  # for the terminal and the page: lone surrogates as U+FFFD
            shown = [] if quiet else records
            view = dict(summary_of=records, task=task_name, model=model_name, heading=heading, note=note)
            if as_json:
                from mrtpo.credit import text_view

                emit(text_view.dumps(text_view.document(shown, **view)))
                console = Console(stderr=True)  # what else is said goes to stderr: stdout stays one JSON
            elif plain if plain is not None else not console.is_terminal:
                import sys

                from mrtpo.credit import text_view

                text_view.render(sys.stdout, shown, **view)
            else:
                terminal.render(console, shown, **view)
            if html_out is not None:
                from mrtpo.credit import html

                html.write(html_out, records, title=f"mrtpo credit: {task_name or target}", task=task_name,
                           model=model_name, meta=heading, note=note)
                console.print(f"wrote {html_out}", highlight=False, markup=False)
            if png_out is not None:
                from mrtpo.credit import png

                if index > len(records):
                    _fail(f"--index {index}: only {len(records)} completions are shown")
                png.heatmap(records[index - 1], png_out)
                total = len(records[index - 1].tokens)
                cut = f" (the first {png.MAX_TOKENS:,} of {total:,} tokens)" if total > png.MAX_TOKENS else ""
                console.print(f"wrote {png_out}{cut}", highlight=False, markup=False)
        except CreditError as exc:
            _fail(str(exc))
        except OutputPathError as exc:
            _fail(f"--html {exc}")


def _from_run(path: Path, step, limit):
    from mrtpo.credit.records import read_run

    view = read_run(path, step, limit)
    heading = (f"run {path} · step {view.step} (logged: {_count(len(view.steps), 'step')}) · "
               f"task {view.task or '?'} · model {view.model or '?'} · {_count(len(view.records), 'completion')}")
    note = "" if view.mrtpo else ("this run had MRTPO off: no distances were logged and every token "
                                  "carried its response's advantage (nothing is shaded)")
    return view.records, view.task, view.model, heading, note


def _fresh(task_name, model, data, responses, task_options, limit, estimator, temperature, device, dtype,
           verify_timeout):
    from mrtpo.cache import CacheError
    from mrtpo.chat import ChatTemplateError
    from mrtpo.commands.options import parse_task_options, task_code
    from mrtpo.credit.records import CreditError, fresh
    from mrtpo.harness.policy import PolicyLoadError
    from mrtpo.harness.run.trained import TrainedModelError
    from mrtpo.tasks import get_task
    from mrtpo.tasks.contract import RewardError
    from mrtpo.tasks.registry import TaskLoadError, TaskNotFound

    if model is None:  # a task without --model: the policy `mrtpo train` trains by default
        from mrtpo.models import builtin

        model = builtin.DEFAULT_MODEL
        print(f"credit: no --model: replaying with the built-in default policy {model}", file=sys.stderr, flush=True)
    try:
        task = get_task(task_name, **parse_task_options(task_options))
        examples = task.load(data)
    except (TaskNotFound, TaskLoadError, FileNotFoundError, ValueError) as exc:
        if isinstance(exc, CreditError):
            raise
        _fail(str(exc) if not isinstance(exc, TaskNotFound) else
              f"{task_name!r} is neither a run directory nor a task: {exc}")
    if limit is not None:
        examples = examples[:limit]
    try:
        with _replay_progress(model) as on_progress:
            with task_code(task, verify_timeout):  # its code in a worker, with a deadline
                records = fresh(task, examples, model, responses, estimator, temperature, device, dtype,
                                on_progress=on_progress)
    except (PolicyLoadError, TrainedModelError, RewardError, ChatTemplateError, CacheError) as exc:
        _fail(str(exc))
    source = f"responses from {responses}" if responses else _replayed(records)
    heading = (f"task {task.name} · model {model} · {_count(len(examples), 'example')} · {source} · "
               f"{estimator} credit per example")
    return records, task.name, model, heading, ""


_PROBE_WORDS = {"reference": "reference", "corrupted": "corrupted copy",
                "empty": "a single empty response (no reference)"}


def _replayed(records) -> str:
    """What was replayed per example, from the records' names: "reference + corrupted copy per
    example" when every example had both, else what each share of the examples had (a task
    without references replays a single empty response)."""
    from collections import Counter

    per_example: dict[str, list[str]] = {}
    for r in records:
        per_example.setdefault(r.example_id, []).append(r.name.split(" (")[0])
    shapes = Counter(" + ".join(_PROBE_WORDS.get(n, n) for n in names) for names in per_example.values())
    if not shapes:
        return "no responses replayed"
    if len(shapes) == 1:
        return f"{next(iter(shapes))} per example"
    return "; ".join(f"{shape} for {_count(n, 'example')}" for shape, n in shapes.most_common())


class _replay_progress:
    """`with _replay_progress(model) as on_progress`: the replay's progress on stderr, a rich
    bar on a terminal, plain lines in a log (mrtpo.progress)."""

    def __init__(self, model: str):
        self.model = model
        self._bar = None

    def __enter__(self):
        from rich.console import Console

        from mrtpo.progress import PlainProgress, lines_wanted

        console = Console(stderr=True)
        if lines_wanted(console):
            lines = PlainProgress("credit", 0, unit="response")
            lines.line(f"loading {self.model}, scoring the responses")

            def plain(done: int, total: int) -> None:
                lines.total = total
                lines.update(done, "replaying under P_all and each P_without_k")
            return plain
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._bar = Progress(TextColumn("[bold]credit[/bold] replaying"), BarColumn(), MofNCompleteColumn(),
                             TimeRemainingColumn(), console=console, transient=True)
        self._bar.__enter__()
        task = self._bar.add_task("replay", total=None)
        return lambda done, total: self._bar.update(task, completed=done, total=total)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.__exit__(*exc)
        return False


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code=2)
