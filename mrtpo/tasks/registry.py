"""The task registry: built-in tasks, `@register_task`, and the `mrtpo.tasks` entry points.

Built-ins are named here as import paths and imported only when asked for; plugins are
discovered through the `mrtpo.tasks` entry-point group and loaded lazily too (only the
entry point whose name was asked for), so a broken plugin cannot break unrelated tasks.
An entry point names a Task subclass or a factory returning a Task.
"""
from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable

from mrtpo.tasks.base import Task
from mrtpo.tasks.options import TaskOptionError, check_options

ENTRY_POINT_GROUP = "mrtpo.tasks"

#: name -> "module:attribute"; imported on first use
BUILTIN_TASKS: dict[str, str] = {
    "text2sql": "mrtpo.tasks.text2sql:Text2SQLTask",
    "instruct": "mrtpo.tasks.instruct:InstructTask",
    "toolcall": "mrtpo.tasks.toolcall:ToolCallTask",
}


class TaskNotFound(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; show it plainly
        return str(self.args[0])


class TaskLoadError(RuntimeError):
    pass


@dataclass(frozen=True)
class TaskInfo:
    name: str
    origin: str  # "built-in", "registered" (decorator at run time) or "dist==version"
    factory: Callable[..., Task] | None = None  # None until loaded
    entry_point: Any = None


_registered: dict[str, TaskInfo] = {}


def register_task(name: str | None = None, *, origin: str = "registered"):
    """Decorator: `@register_task("my_task")` on a Task subclass or a factory returning one.

    Registering the same object twice is harmless; a second, different object under a name
    already taken is rejected.
    """

    def deco(obj):
        key = name or getattr(obj, "name", "") or obj.__name__
        prev = _registered.get(key)
        if prev is not None and prev.factory is not obj and not _same_object(prev.factory, obj):
            raise ValueError(
                f"task {key!r} is already registered to {_describe(prev.factory)} "
                f"({prev.origin}); refusing to replace it with {_describe(obj)}. "
                "Pick another name or unregister the first one."
            )
        if key in BUILTIN_TASKS and origin == "registered" and not _is_builtin_path(key, obj):
            raise ValueError(f"task name {key!r} is taken by a built-in task; pick another name")
        _registered[key] = TaskInfo(key, origin, obj)
        return obj

    return deco


def unregister_task(name: str) -> None:
    _registered.pop(name, None)


def _same_object(a, b) -> bool:
    return a is not None and b is not None and (
        getattr(a, "__module__", None), getattr(a, "__qualname__", None)
    ) == (getattr(b, "__module__", None), getattr(b, "__qualname__", None))


def _describe(obj) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _is_builtin_path(name: str, obj) -> bool:
    module, _, attr = BUILTIN_TASKS[name].partition(":")
    return getattr(obj, "__module__", None) == module and getattr(obj, "__qualname__", None) == attr


def _entry_points() -> dict[str, metadata.EntryPoint]:
    eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    found: dict[str, metadata.EntryPoint] = {}
    for ep in eps:
        found.setdefault(ep.name, ep)
    return found


def _ep_origin(ep) -> str:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "plugin"
    return f"{dist.metadata['Name']}=={dist.version}"


def available_tasks() -> dict[str, str]:
    """name -> origin for every task that can be asked for (nothing is imported)."""
    out = {name: "built-in" for name in BUILTIN_TASKS}
    for name, ep in _entry_points().items():
        out.setdefault(name, _ep_origin(ep))
    for name, info in _registered.items():
        out.setdefault(name, info.origin)
    return dict(sorted(out.items()))


def _load_factory(name: str) -> tuple[Callable[..., Task], str]:
    if name in BUILTIN_TASKS:
        module, _, attr = BUILTIN_TASKS[name].partition(":")
        return getattr(importlib.import_module(module), attr), "built-in"
    prev = _registered.get(name)
    if prev is not None and prev.entry_point is not None:  # a plugin loaded before
        return prev.factory, prev.origin
    eps = _entry_points()
    if prev is not None and name not in eps:
        return prev.factory, prev.origin
    if name in eps:
        ep = eps[name]
        origin = _ep_origin(ep)
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin: say whose it is and what went wrong
            raise TaskLoadError(
                f"task {name!r} from {origin} (entry point {ep.value!r} in group "
                f"{ENTRY_POINT_GROUP!r}) failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        if prev is not None and not _same_object(prev.factory, obj):
            raise TaskLoadError(
                f"task {name!r} from {origin} points at {_describe(obj)}, but {name!r} is "
                f"already registered to {_describe(prev.factory)} ({prev.origin})"
            )
        _registered[name] = TaskInfo(name, origin, obj, ep)
        return obj, origin
    known = list(available_tasks())
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise TaskNotFound(
        f"unknown task {name!r}.{hint} Known tasks: {', '.join(known)}. "
        f"Plugins register tasks in the {ENTRY_POINT_GROUP!r} entry-point group."
    )


def get_task(name: str, **kwargs) -> Task:
    """Instantiate the task registered as `name`; kwargs go to its constructor/factory."""
    factory, origin = _load_factory(name)
    kwargs = check_options(name, factory, kwargs)  # names and declared types (mrtpo.tasks.options)
    try:
        task = factory(**kwargs)
    except TypeError as exc:
        raise TypeError(f"task {name!r} ({origin}) could not be built with {kwargs}: {exc}") from exc
    except ValueError as exc:  # the task's own check of an option's value
        if isinstance(exc, TaskOptionError):
            raise
        raise TaskOptionError(f"task {name!r}: {exc}") from exc
    if not isinstance(task, Task):
        raise TaskLoadError(
            f"task {name!r} ({origin}) produced {type(task).__name__}, not a mrtpo Task"
        )
    if not task.name:
        task.name = name
    return task
