"""Tasks: the types, the registry, and the built-in tasks (imported lazily by name)."""
from mrtpo.tasks.base import Example, Placement, ProbeEdit, Reward, Task, Verdict
from mrtpo.tasks.options import TaskOptionError
from mrtpo.tasks.registry import (
    ENTRY_POINT_GROUP,
    TaskLoadError,
    TaskNotFound,
    available_tasks,
    get_task,
    register_task,
    unregister_task,
)

__all__ = [
    "ENTRY_POINT_GROUP", "Example", "Placement", "ProbeEdit", "Reward", "Task", "TaskLoadError",
    "TaskNotFound", "TaskOptionError", "Verdict", "available_tasks", "get_task", "register_task", "unregister_task",
]
