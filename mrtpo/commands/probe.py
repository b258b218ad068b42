"""`mrtpo probe`: does each reward's distance land on the tokens that reward is about?

    mrtpo probe toolcall                          # the built-in policy, bundled sample
    mrtpo probe text2sql --model ./my-model --data spider_dev.jsonl --limit 50 --json

Run it before spending GPU hours: it edits each example's reference once per reward (a value,
a column, an end phrase), replays the edits under the task's contexts, and prints per edit
kind each reward's lift on the edited tokens and the specificity, beside the same figures of
a random-init model of the same architecture (the control). See mrtpo/credit/probe.py.
"""
from __future__ import annotations

import math
import sys
from typing import Annotated, Optional

import typer

from mrtpo.commands.jsonout import emit
from mrtpo.commands.options import TaskOptions, VerifyTimeout, parse_task_options, task_code
from mrtpo.tasks.runner import DEFAULT_TIMEOUT


def register(app: typer.Typer) -> None:
    @app.command("probe")
    def probe_cmd(
        task_name: Annotated[str, typer.Argument(metavar="TASK", help="A registered task (mrtpo tasks ls).")],
        model: Annotated[Optional[str], typer.Option("--model", help="The policy to probe: a directory, a hub id, or a built-in policy (default: the built-in default policy, as `mrtpo train`).")] = None,
        data: Annotated[Optional[str], typer.Option("--data", help="Dataset path; default: the task's bundled sample.")] = None,
        limit: Annotated[Optional[int], typer.Option("--limit", min=1, help="Probe the first N examples.")] = None,
        task_options: TaskOptions = None,
        control: Annotated[bool, typer.Option("--control/--no-control", help="Also probe a random-init model of the same architecture.")] = True,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (summary, control and every edit).")] = False,
        device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda, cuda:1...")] = "auto",
        dtype: Annotated[str, typer.Option("--dtype", help="auto, float32, bfloat16 or float16.")] = "auto",
        verify_timeout: VerifyTimeout = DEFAULT_TIMEOUT,
    ) -> None:
        """Where each reward's distance lands: targeted edits of the references, replayed.

        Per edit kind: each reward's lift (its distance's share on the edited tokens over
        those tokens' share of the response; 1 = no information) and the specificity (the
        lift of the reward the edit is about over the largest other lift), also on the
        edit's first token alone (where the policy decides the edited aspect; the later
        tokens follow a prefix it never produced), for the model and for a random-init
        control. "own/text": the own reward's distance on the first edited token over that
        of P_all with as many tokens of unrelated text as its block inserted right after it
        (the same size of change, without the information; read it beside the control's,
        which is not exactly 1). Then a one-line verdict (on the whole span).
        """
        from mrtpo.cache import CacheError
        from mrtpo.credit import probe
        from mrtpo.harness.policy import PolicyLoadError, load_policy
        from mrtpo.models import builtin
        from mrtpo.models.builds import resolve_model

        model = model or builtin.DEFAULT_MODEL
        from mrtpo.tasks import get_task
        from mrtpo.tasks.contract import RewardError, checked_reference
        from mrtpo.tasks.registry import TaskLoadError, TaskNotFound

        try:
            task = get_task(task_name, **parse_task_options(task_options))
            examples = task.load(data)
        except (TaskNotFound, TaskLoadError, FileNotFoundError, ValueError) as exc:
            _fail(str(exc))
        if limit is not None:
            examples = examples[:limit]
        if not examples:
            _fail(f"no examples to probe in {data or 'the bundled sample'}")
        with task_code(task, verify_timeout):  # its code in a worker, with a deadline
            try:
                with_reference = sum(checked_reference(task, ex) is not None for ex in examples)
            except RewardError as exc:
                _fail(str(exc))
            if not with_reference:
                _fail(f"task {task.name!r} has no reference for any of the {len(examples)} examples "
                      "(task.reference(example) returned None); the probe edits each example's "
                      "reference, so define Task.reference (and Task.probe_edits) as "
                      "docs/custom-tasks.md shows")
            try:
                path = resolve_model(model)
                policy = load_policy(path, lora=False, device=device, dtype=dtype)
            except (PolicyLoadError, CacheError) as exc:
                _fail(str(exc))
            shown = model if str(path) == model else f"{model} ({path})"
            print(f"probing {task.name} with {model}: {len(examples)} examples ...", file=sys.stderr, flush=True)
            try:
                report = probe.run(task, examples, policy.model, policy.tokenizer, model_name=shown, control=control)
            except (ValueError, RewardError) as exc:
                _fail(str(exc))
            if not report.edits:
                _fail(f"task {task.name!r} made no probe edit that lowers its reward on these examples; "
                      "a custom task provides edits by overriding Task.probe_edits (see docs/custom-tasks.md)")
            if as_json:
                from mrtpo.textio import strict_json as dumps

                emit(dumps({"schema": "mrtpo.probe/1", **report.to_dict()}, indent=1))
            else:
                typer.echo(render(report))


def render(report) -> str:
    """The probe as plain text: a table per model (the policy, then the control), a verdict."""
    lines = [f"credit probe · task {report.task} · model {report.model} · {report.examples} examples · "
             f"{len(report.edits)} edits ({len(report.skipped)} skipped: they did not lower their reward)"]
    for title, kinds in (("model", report.kinds), ("random-init control", report.control)):
        if kinds is None:
            continue
        lines += ["", f"{title}:", f"  {'edit':<34} {'about':<22} {'n':>3} {'span':>5}  {'own lift':>8}  "
                  f"{'best other':<26} {'specificity':>11} {'at 1st token':>12} {'own/text':>8}"]
        for k in kinds:
            other, other_lift = k.best_other
            lines.append(f"  {k.kind[:34]:<34} {k.reward[:22]:<22} {k.edits:>3} {k.token_share:>5.2f}  "
                         f"{_f(k.own_lift):>8}  {(other[:16] + ' ' + _f(other_lift)):<26} {_f(k.specificity):>11} "
                         f"{_f(k.decision_specificity):>12} {_f(k.own_over_text):>8}")
        rest = sorted({r for k in kinds for r in k.lift if r not in ("(own)", "(best other)")})
        if rest:
            lines.append("  lifts per reward: " + "; ".join(
                f"{k.kind}: " + ", ".join(f"{r} {_f(k.lift.get(r, math.nan))}" for r in rest) for k in kinds))
    lines += ["", "verdict: " + report.verdict()]
    return "\n".join(lines)


def _f(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.2f}"


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code=2)
