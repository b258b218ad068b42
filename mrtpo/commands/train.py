"""`mrtpo train`: the compact trainer's command line.

Every flag is a field of `mrtpo.harness.config.TrainConfig`: the options are generated from
its fields (name, type, one-line help), so the config, the YAML file and the flags cannot
drift apart. The one exception in spelling: `task_args` is `-o/--task-option KEY=VALUE`, as in
every other command (parsed by mrtpo.commands.options); `--task-arg` is still read, unlisted.
Only flags the user typed override the YAML file (`--config`); on `--resume` the run
directory's saved config is the base. Library errors become one red line and a non-zero exit,
not a traceback.
"""
from __future__ import annotations

import dataclasses
import inspect
import signal
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from mrtpo.commands import options as task_options
from mrtpo.models.builtin import DEFAULT_MODEL, TRAIN_DEFAULTS

# multi-valued settings: the flag's names; KEY=VALUE pairs become the config's dict
# (task_args through the shared -o/--task-option parser, reward weights as numbers)
_PAIR_FLAGS = {"task_args": (task_options.FLAG, "-o"), "reward_weights": ("--reward-weight",)}
# the spelling --task-arg had before every command said -o/--task-option: still read, not shown
_LEGACY_TASK_ARG = "legacy_task_arg"


def _options() -> list[inspect.Parameter]:
    from mrtpo.harness.config import TrainConfig, field_default

    hints = typing.get_type_hints(TrainConfig)
    params = [inspect.Parameter(
        "config", inspect.Parameter.KEYWORD_ONLY, default=None,
        annotation=Annotated[Optional[Path], typer.Option(
            "--config", help="YAML file of settings (keys as the flags, '-' or '_'); flags given override it.")])]
    for f in dataclasses.fields(TrainConfig):
        help_text = f.metadata.get("help", "")
        default = field_default(f.name)
        if f.name == "model":  # no --model: the built-in policy, built on first use
            default = "the built-in default policy (mrtpo model ls)"
        elif f.name == "task":
            default = f"{TRAIN_DEFAULTS[DEFAULT_MODEL]['task']} with the built-in policy, else required"
        if f.name in _PAIR_FLAGS:
            if f.name == "task_args":  # the same words as every other command's -o
                help_text = task_options.HELP + " Config file key: task_args."
            option = typer.Option(*_PAIR_FLAGS[f.name], help=help_text, show_default=_shown(default))
            tp: Any = Optional[list[str]]
        else:
            flag = "--" + f.name.replace("_", "-")
            tp = hints[f.name]
            if tp is bool:
                flag = f"{flag}/--no-{f.name.replace('_', '-')}"
            elif typing.get_origin(tp) is list:
                tp = list[str]
                help_text += " Repeat the flag or separate names with commas."
            else:  # `X | None` -> X; typer gets None when the flag is absent anyway
                args = [a for a in typing.get_args(tp) if a is not type(None)]
                if typing.get_origin(tp) in (typing.Union, types.UnionType):
                    tp = args[0]
            option = typer.Option(flag, help=help_text, show_default=_shown(default))
            tp = Optional[tp]
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                        annotation=Annotated[tp, option]))
        if f.name == "task_args":
            params.append(inspect.Parameter(
                _LEGACY_TASK_ARG, inspect.Parameter.KEYWORD_ONLY, default=None,
                annotation=Annotated[Optional[list[str]], typer.Option(
                    "--task-arg", hidden=True, help="Old name of -o/--task-option.")]))
    return params


def _shown(default: Any) -> str:
    """The default as --help shows it (the option's own default is None: 'not given')."""
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, list):
        return ",".join(map(str, default)) or "none"
    if isinstance(default, dict):
        return ", ".join(f"{k}={v}" for k, v in default.items()) or "none"
    return "none" if default is None else str(default)


def _weights(values: list[str], flag: str) -> dict[str, float]:
    """--reward-weight NAME=W pairs -> {name: float}."""
    out: dict[str, float] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r}: expected KEY=VALUE, a reward's NAME=WEIGHT, e.g. format=1.0 "
                                     "(TRL's positional list is not read: rewards differ per example)", param_hint=flag)
        try:
            out[key.strip()] = float(raw)
        except ValueError as exc:
            raise typer.BadParameter(f"{item!r}: {exc}", param_hint=flag) from exc
    return out


def overrides_from_flags(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The settings the user typed (None = flag absent), converted to config values."""
    out = {k: v for k, v in kwargs.items() if v is not None}
    legacy = out.pop(_LEGACY_TASK_ARG, None)
    if legacy is not None or "task_args" in out:  # -o given after --task-arg wins on a shared key
        out["task_args"] = {**task_options.parse_task_options(legacy, "--task-arg"),
                            **task_options.parse_task_options(out.get("task_args"))}
    if "reward_weights" in out:
        out["reward_weights"] = _weights(out["reward_weights"], "--reward-weight")
    if "lora_target_modules" in out:
        out["lora_target_modules"] = [m.strip() for v in out["lora_target_modules"]
                                      for m in v.split(",") if m.strip()]
    return out


def run(**kwargs) -> None:
    """Train a policy with GRPO / GDPO (+ SAW), MRTPO token credit on top (LoRA by default).

    TRL's names work too, on the command line and in --config YAML: learning_rate (--lr), max_completion_length (--max-new-tokens), max_steps (--steps), gradient_accumulation_steps (--grad-accum), save_steps (--save-every), reward_weights (--reward-weight); any flag may be spelt with underscores (--num_generations). Older names: --heldout-every is --eval-every, --eval-size is --heldout (one held-out measurement since they merged).
    """  # noqa: E501 (one paragraph: --help wraps it)
    from rich.console import Console

    from mrtpo.cache import CacheError
    from mrtpo.chat import ChatTemplateError
    from mrtpo.harness.config import ConfigError, read_yaml, resolve
    from mrtpo.harness.data import DataError
    from mrtpo.harness.policy import PolicyLoadError
    from mrtpo.harness.run.checkpoints import SaveError
    from mrtpo.harness.update import NonFiniteError
    from mrtpo.models.packaged import PackagedModelError
    from mrtpo.tasks import TaskLoadError, TaskNotFound, TaskOptionError
    from mrtpo.tasks.contract import RewardError

    err = Console(stderr=True)
    config_file = kwargs.pop("config")
    try:
        overrides = overrides_from_flags(kwargs)
        cfg = resolve(config_file, overrides)
        given = {**(read_yaml(config_file) if config_file else {}), **overrides}
    except ConfigError as exc:
        _say(err, "error", exc)
        raise typer.Exit(2)
    from mrtpo.harness.config import defaults_line
    from mrtpo.harness.distributed import is_main_process

    if not cfg.resume and is_main_process():  # a resumed run trains with its saved config.yaml
        err.print(defaults_line(given, cfg.model), highlight=False, soft_wrap=True, markup=False)
    try:
        with _stop_signals() as stopped:
            result = _train_with_progress(cfg, err)
    except (KeyboardInterrupt, _Stopped) as exc:  # Ctrl-C, or SIGTERM (a job scheduler, kill)
        from mrtpo.harness.run.checkpoints import where_to_resume

        signum = exc.signum if isinstance(exc, _Stopped) else signal.SIGINT
        if stopped.main:
            err.print(f"train: stopped by {signal.Signals(signum).name}; "
                      f"{where_to_resume(cfg.run_dir, cfg.steps)}", highlight=False, markup=False,
                      soft_wrap=True)
        raise typer.Exit(128 + signum)
    except (ConfigError, DataError, PolicyLoadError, PackagedModelError, TaskNotFound, TaskLoadError,
            TaskOptionError, ChatTemplateError, CacheError) as exc:
        _say(err, "error", exc)
        raise typer.Exit(2)
    except RewardError as exc:
        _say(err, "reward error", exc)
        raise typer.Exit(1)
    except (NonFiniteError, SaveError) as exc:
        _say(err, "error", exc)
        raise typer.Exit(1)
    from mrtpo.harness.distributed import leave_process_group

    leave_process_group()  # a launched run ended well: its processes leave the group before exit
    if is_main_process():  # under `accelerate launch`, one summary, not one per process
        _summary(result, Console())


class _Stopped(BaseException):
    """SIGTERM arrived while training: raised in the main thread (as Ctrl-C raises
    KeyboardInterrupt), so the run's `finally` blocks run and `run` says how to resume."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _stop_signals:
    """While training, SIGTERM raises _Stopped in the main thread; `main`: whether this is the
    process that speaks (the first of a data-parallel run)."""

    def __enter__(self):
        import threading

        from mrtpo.harness.distributed import is_main_process

        self.main = is_main_process()
        self.old = None
        if threading.current_thread() is threading.main_thread():
            def stop(signum, frame):
                raise _Stopped(signum)
            self.old = signal.signal(signal.SIGTERM, stop)
        return self

    def __exit__(self, *exc) -> bool:
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)
        return False


def _say(console, label: str, exc: BaseException) -> None:
    """One red `label:` and the message as it is: rich markup in it (`pip install
    "mrtpo[trackers]"`, a path with brackets) is printed, not read as markup."""
    from rich.markup import escape

    console.print(f"[red]{label}:[/red] {escape(str(exc))}", highlight=False)


def _train_with_progress(cfg, console):
    """Train with a display of each phase: the build of a built-in policy on first use, the
    held-out measurement before training, the steps (count, time per step, ETA, rewards) and
    the measurement after. In a log, plain `train: ...` lines (mrtpo.progress); on a terminal,
    each phase's line and a bar over the steps."""
    from functools import partial

    from transformers.utils import logging as hf_logging

    from mrtpo.evaluation.heldout import measure
    from mrtpo.harness import train
    from mrtpo.harness.distributed import is_main_process

    hf_logging.disable_progress_bar()  # our bar only
    if not is_main_process():  # other processes of a data-parallel run train without a display
        return train(cfg)
    from mrtpo.progress import PlainProgress, lines_wanted

    if lines_wanted(console):  # a log (nohup, Slurm, CI): plain lines at a steady rate
        lines = PlainProgress("train", cfg.steps, unit="step")
        lines.line(f"loading model {cfg.model} and data for task {cfg.task}; run directory {cfg.run_dir}")
        return train(cfg, on_start=lambda first: lines.update(first, "sampling"),
                     on_step=lambda record: lines.update(record["step"], _reward_line(record)),
                     on_phase=lines.line, measure=partial(_measure, measure, "train: "))
    display = _Bar(cfg.steps, console)
    console.print(f"train: loading model {cfg.model} and data for task {cfg.task}", highlight=False, markup=False)
    try:
        return train(cfg, on_start=display.start, on_step=display.step, on_phase=display.phase,
                     measure=partial(_measure, measure, ""))
    finally:
        display.stop()


def _measure(measure, prefix: str, *args, description: str, **kwargs):
    """The official held-out metric, its generation's progress labelled as the train phase it is."""
    return measure(*args, description=prefix + description, **kwargs)


class _Bar:
    """A terminal's display: a line per phase, and a bar over the steps that starts with the
    first step (so a build's or an evaluation's own bar never runs beside it), ends at the
    next phase (a held-out measurement) and goes on, a new one, at the step after it."""

    def __init__(self, steps: int, console):
        self.steps, self.console = steps, console
        self.progress = self.bar = None
        self.started = False

    def start(self, first: int) -> None:
        self.started = True
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                 TextColumn("{task.description}", markup=False), console=self.console,
                                 transient=False)
        self.progress.start()
        self.bar = self.progress.add_task("sampling", total=self.steps, completed=first)

    def step(self, record: dict[str, Any]) -> None:
        if self.progress is None and self.started:  # a phase ended the bar: the steps go on in a new one
            self.start(record["step"] - 1)
        if self.progress is not None:
            self.progress.update(self.bar, completed=record["step"], description=_reward_line(record))

    def phase(self, text: str) -> None:
        self.stop()
        self.console.print(f"train: {text}", highlight=False, markup=False)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _reward_line(record: dict[str, Any], limit: int = 4) -> str:
    means = [(k.split("/")[1], v) for k, v in record.items()
             if k.startswith("rewards/") and k.endswith("/mean") and v is not None]
    total = record.get("reward")  # None when it was not a finite number (metrics.clean)
    parts = [f"reward {total:.3f}" if total is not None else "reward n/a"] + [
        f"{n} {v:.2f}" for n, v in means[:limit]]
    if len(means) > limit:
        parts.append(f"+{len(means) - limit} more")
    return " | ".join(parts)


def fifth_means(values: list) -> tuple[float | None, float | None]:
    """The mean over the first and over the last fifth (at least one) of the values that are
    not None (a reward absent from a step, as an instruction's constraint can be, is skipped).
    A fifth, not a tenth: a step's mean over a few completions moves in coarse steps, and a
    tenth of a 10- or 20-step run is 1 or 2 steps, too few to tell a rise from a lucky step."""
    seen = [v for v in values if v is not None]
    if not seen:
        return None, None
    k = max(1, len(seen) // 5)
    return sum(seen[:k]) / k, sum(seen[-k:]) / k


def _summary(result, console) -> None:
    """Each reward's mean over the first and the last fifth of the steps, time per phase,
    and where the run is."""
    from rich.markup import escape
    from rich.table import Table

    history = result.history
    if not history:
        console.print(f"nothing to do: the run is already at step {result.config.steps}. "
                      f"Run directory: {result.run_dir}", markup=False)
        _heldout_line(result, console)
        return
    names = list(dict.fromkeys(k for r in history for k in r
                               if k.startswith("rewards/") and k.endswith("/mean")))
    fifth = max(1, len(history) // 5)
    console.print(f"reward means over the first and the last {fifth} of {len(history)} steps:",
                  highlight=False)
    table = Table("reward", "first", "last", "change", box=None, pad_edge=False)
    for key in ["reward"] + names:
        first, last = fifth_means([r.get(key) for r in history])
        if first is not None:
            label = key if key == "reward" else key[len("rewards/"):-len("/mean")]
            table.add_row(escape(label), f"{first:.4f}", f"{last:.4f}", f"{last - first:+.4f}")
    console.print(table)
    phases = Table("phase", "total s", "per step s", box=None, pad_edge=False, title="time")
    for phase in ("generate", "verify", "replay", "update", "eval", "step"):
        values = [r.get(f"time/{phase}") or 0.0 for r in history]
        if any(values):
            phases.add_row(phase, f"{sum(values):.1f}", f"{sum(values) / len(values):.2f}")
    console.print(phases)
    dead = [r.get("frac_reward_zero_std") for r in history]
    if dead and all(d == 1.0 for d in dead):
        console.print("note: in every step each group's completions had the same total reward, so "
                      "every advantage was 0 and nothing was learned (frac_reward_zero_std = 1). "
                      "Rewards need spread within a group: a stronger starting policy, more "
                      "--num-generations, or a higher --temperature.", highlight=False)
    console.print(f"run directory: {result.run_dir}", highlight=False, markup=False)
    _heldout_line(result, console)


def _heldout_line(result, console) -> None:
    """The held-out before/after (heldout.json) as the run's last line."""
    from mrtpo.harness.run.heldout import line

    text = line(result.heldout) if result.heldout else None
    if text is not None:
        console.print(text, highlight=False, markup=False, soft_wrap=True)


def refuse_two_spellings(params: list, args: list[str]) -> None:
    """Two spellings of one setting on the command line (`--lr 0.1 --learning_rate 0.2`,
    `--max_steps 1 --steps 3`, `--num_generations 2 --num-generations 4`, `--lora --no-lora`)
    are refused, as two such keys in a --config file are, instead of silently keeping the last.
    Repeatable flags (-o, --reward-weight, --report-to...) and one spelling repeated are not."""
    from mrtpo.harness.trl_names import normalize_flag

    def norm(opt: str) -> str:
        return "--" + normalize_flag(opt[2:]) if opt.startswith("--") else opt

    options = {norm(o): p for p in params if getattr(p, "param_type_name", "") == "option"
               for o in p.opts + p.secondary_opts}
    seen: dict[str, str] = {}  # setting -> the spelling that gave it first
    tokens = iter(args)
    for token in tokens:
        if token == "--":
            break
        name, eq, _ = token.partition("=")
        param = options.get(norm(name)) if name.startswith("--") else None
        if param is None:
            continue
        if not param.is_flag and not eq:
            next(tokens, None)  # its value, which may look like a flag
        if param.multiple:
            continue
        first = seen.setdefault(param.name, name)
        if first != name:
            raise typer.BadParameter(f"{first} and {name} name the same setting; give it once",
                                     param_hint=param.opts[0])


def _command_class():
    """typer's command class for `mrtpo train`, refusing two spellings of one setting."""
    from typer.core import TyperCommand

    class TrainCommand(TyperCommand):
        def parse_args(self, ctx, args):
            refuse_two_spellings(self.get_params(ctx), list(args))
            return super().parse_args(ctx, args)

    return TrainCommand


def register(app: typer.Typer) -> None:
    from mrtpo.harness.trl_names import normalize_flag

    run.__signature__ = inspect.Signature(_options())
    # TRL's names (--learning_rate, --max_steps, ...) and underscore spellings, not listed
    app.command("train", help=run.__doc__, cls=_command_class(),
                context_settings={"token_normalize_func": normalize_flag})(run)
