"""Lazy registries of tasks and systems, discovered through Python entry points.

* ``ddibench.tasks``: each entry point loads a mapping ``{task name: Task}`` (one per task family).
* ``ddibench.systems``: each entry point loads one System class; its name is the entry point's name.

ddibench's own tasks and reference systems register exactly like an outside package would, in its
``pyproject.toml``. Nothing is imported until a name is asked for (listing systems imports only
their modules, which keep heavy imports inside methods). Unknown names get a "did you mean" error.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from ddibench.errors import ConfigError, UnknownNameError

if TYPE_CHECKING:
    from ddibench.system import System
    from ddibench.task import Task

TASK_GROUP = "ddibench.tasks"
SYSTEM_GROUP = "ddibench.systems"


def _entry_points(group: str) -> list[EntryPoint]:
    return sorted(entry_points(group=group), key=lambda ep: ep.name)


@cache
def _tasks() -> dict[str, Task]:
    out: dict[str, Task] = {}
    origin: dict[str, str] = {}
    for ep in _entry_points(TASK_GROUP):
        provided = ep.load()
        if not hasattr(provided, "items"):
            raise ConfigError(f"entry point '{ep.value}' in group {TASK_GROUP} is not a mapping of task names to tasks")
        for name, task in provided.items():
            if name in out:
                raise ConfigError(f"task '{name}' is registered twice ({origin[name]} and {ep.value})", "rename one")
            out[name] = task
            origin[name] = ep.value
    return out


def load_task_families() -> None:
    """Import every registered task family (so the evaluators they bring are known)."""
    _tasks()


def task_names() -> list[str]:
    return sorted(_tasks())


def get_task(name: str) -> Task:
    tasks = _tasks()
    if name not in tasks:
        raise UnknownNameError("task", name, tasks)
    return tasks[name]


@cache
def _system_entry_points() -> dict[str, EntryPoint]:
    out: dict[str, EntryPoint] = {}
    for ep in _entry_points(SYSTEM_GROUP):
        if ep.name in out and out[ep.name].value != ep.value:
            raise ConfigError(
                f"system '{ep.name}' is registered twice ({out[ep.name].value} and {ep.value})", "uninstall one"
            )
        out[ep.name] = ep
    return out


def system_names() -> list[str]:
    return sorted(_system_entry_points())


def get_system_class(name: str) -> type[System]:
    eps = _system_entry_points()
    if name not in eps:
        raise UnknownNameError("system", name, eps)
    cls: Any = eps[name].load()
    for attr in ("name", "version", "predict", "prepare", "supports"):
        if not hasattr(cls, attr):
            raise ConfigError(
                f"system '{name}' ({eps[name].value}) lacks '{attr}'",
                "implement the ddibench.System protocol (see README, 'Adding a system')",
            )
    if cls.name != name:
        raise ConfigError(f"system class {eps[name].value} says its name is '{cls.name}', registered as '{name}'")
    return cls


def clear_caches() -> None:
    """Forget discovered entry points (after installing a plug-in in the same process)."""
    _tasks.cache_clear()
    _system_entry_points.cache_clear()
