"""Task options: how a KEY=VALUE text is read, and the check of every option against the type
its task declares, in one place for every way a task is built.

`read_value` reads one value as a YAML scalar (`yaml.safe_load`), as TRL's launcher reads
`--task_args`: `true/false/yes/no/on/off` are booleans, numbers are numbers, `null`/`~` is None,
`[1, 2]` and `{a: 1}` are a list and a mapping, anything else is its text. `read_options` reads a list
of KEY=VALUE texts with it; `-o/--task-option` (mrtpo.commands.options), `python -m
mrtpo.integrations.trl --task_args` and the benchmarks' `-o` all use that.

`check_options` runs inside `mrtpo.tasks.get_task`, so `mrtpo train | eval | blocks | credit`,
the TRL launcher and the Python API all get the same errors: an option the task's constructor
does not take is named with the options it does take, and a value that does not fit the
declared type (`think=maybe` for a bool, `timeout=abc` for a float) is refused with what is
expected. Values are converted only where nothing can be lost: a numeric text for an int or a
float option, an int for a float option, a number for a text option, "none" for an optional one.
"""
from __future__ import annotations

import collections.abc as cabc
import difflib
import inspect
import math
import types
import typing
from pathlib import Path
from typing import Any, Callable, Literal, Union

from mrtpo.textio import brief


class TaskOptionError(ValueError):
    """A task option the task does not take, or whose value does not fit its declared type."""


def read_value(raw: str, source: str = "option value") -> Any:
    """One option value, read as a YAML scalar (see the module docstring) by mrtpo's one YAML
    reader (mrtpo.yamlio: an alias bomb or a repeated key is a TaskOptionError naming `source`)."""
    import yaml

    from mrtpo.yamlio import YAMLRefused, load_yaml

    try:
        return load_yaml(raw, source)
    except YAMLRefused as exc:
        raise TaskOptionError(str(exc)) from None
    except yaml.YAMLError:
        return raw  # not YAML (an unbalanced bracket...): the text as it is


class OptionSyntaxError(ValueError):
    """A KEY=VALUE text that is not one (`item` is the text); each caller words its message."""

    def __init__(self, item: str):
        super().__init__(item)
        self.item = item


def read_options(items) -> dict[str, Any]:
    """["think=true", "mode=set"] -> {"think": True, "mode": "set"}, each value read by
    `read_value`; a later KEY wins. An item with no "=" or whose key is not an identifier
    raises OptionSyntaxError."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise OptionSyntaxError(item)
        out[key.strip()] = read_value(value, f"{key.strip()}=")
    return out


def check_options(name: str, factory: Callable, options: dict[str, Any]) -> dict[str, Any]:
    """`options` checked against `factory`'s signature and annotations; converted values.

    Raises TaskOptionError naming the task, the option and what it accepts."""
    target = factory.__init__ if inspect.isclass(factory) else factory
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to check against
        return dict(options)
    params = {p.name: p for p in sig.parameters.values()
              if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # an annotation that does not resolve: check names only
        hints = {}
    out = {}
    for key, value in options.items():
        if key not in params:
            if takes_any:
                out[key] = value
                continue
            close = difflib.get_close_matches(key, list(params), n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise TaskOptionError(f"task {name!r} has no option {key!r}.{hint} Its options: "
                                  f"{', '.join(params) or 'none'}")
        hint = hints.get(key, Any)
        ok, converted = fit_value(value, hint)
        if not ok:
            what = "a finite number" if not_finite(value) else describe_type(hint)
            raise TaskOptionError(f"task {name!r}, option {key}={brief(value)}: expected "
                                  f"{what}, e.g. -o {key}={_example(hint, params[key])}")
        out[key] = converted
    return out


def fit_value(value: Any, hint: Any) -> tuple[bool, Any]:
    """(fits, converted value) for `value` against the annotation `hint`; also used for
    `mrtpo train`'s own settings (mrtpo.harness.config), so both read values alike."""
    if hint is Any or hint is inspect.Parameter.empty:
        return True, value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
            if type(None) in args:
                return True, None
        for member in (a for a in args if a is not type(None)):
            ok, v = fit_value(value, member)
            if ok:
                return True, v
        return False, value
    if origin is Literal:
        return (value in args), value
    if hint is type(None):
        return value is None, value
    if hint is bool:
        return isinstance(value, bool), value
    if hint in (int, float):
        return _number(value, hint)
    if hint is str or hint is Path or (inspect.isclass(hint) and issubclass(hint, Path)):
        if isinstance(value, str):
            return True, value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, str(value)
        return False, value
    check = origin or hint
    if check in (dict, cabc.Mapping, cabc.MutableMapping):
        return isinstance(value, dict), value
    if check in (list, tuple, cabc.Sequence, cabc.MutableSequence, cabc.Iterable):
        return (isinstance(value, (list, tuple)) and not isinstance(value, str)), value
    if inspect.isclass(check):
        return isinstance(value, check), value
    return True, value


def _number(value: Any, kind: type) -> tuple[bool, Any]:
    """An int or float option: numbers (whole floats for an int) and numeric text fit; bools do
    not, nor does a float that is not finite (nan, .inf): no option means anything by them, and
    code that turns seconds into milliseconds or counts fails on them with an opaque error."""
    if isinstance(value, bool):
        return False, value
    if isinstance(value, str):
        try:
            value = kind(value.strip())
        except ValueError:
            return False, value
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if kind is float and isinstance(value, int):
        value = float(value)
    if kind is float and isinstance(value, float) and not math.isfinite(value):
        return False, value
    return isinstance(value, kind), value


def not_finite(value: Any) -> bool:
    """Whether `value` is a float, or a numeric text, that is nan or infinite."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return False
    return isinstance(value, float) and not math.isfinite(value)


def describe_type(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        parts = [describe_type(a) for a in args if a is not type(None)]
        text = " or ".join(dict.fromkeys(parts))
        return text + (" or none" if type(None) in args else "")
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if hint is bool:
        return "true or false"
    if hint is int:
        return "a whole number"
    if hint is float:
        return "a number"
    if hint is str or hint is Path:
        return "text"
    check = origin or hint
    if check in (dict, cabc.Mapping, cabc.MutableMapping):
        return "a mapping such as {name: 1.0}"
    if check in (list, tuple, cabc.Sequence, cabc.MutableSequence, cabc.Iterable):
        return "a list such as [1, 2]"
    return getattr(hint, "__name__", str(hint))


def _example(hint: Any, param: inspect.Parameter) -> str:
    default = param.default
    if isinstance(default, bool):
        return "true" if not default else "false"
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        return str(default)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        for a in args:
            if typing.get_origin(a) is Literal:
                return str(typing.get_args(a)[0])
    if origin is Literal:
        return str(args[0])
    return "VALUE"
