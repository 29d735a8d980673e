"""The one registry of training tasks: name -> :class:`~ctxemb.training.task.Task` (fine-tuning, pretraining, sense
training and a user's own).

The built-in families register themselves: the first lookup (:func:`get_task`, :func:`task_names`) imports
:data:`BUILTIN_TASKS_MODULE` (:mod:`ctxemb.tasks.builtin`), which registers every family folder under
``ctxemb/tasks/``. It is imported by name, as a plugin is, because the families sit above the training package and
build on it: the registry is complete whatever the caller imported, and this package imports nothing above it. A
user's task registers with :func:`register_task` and then trains, saves and predicts through the same path
(``ctxemb finetune NAME``, :func:`ctxemb.training.runner.run_task`, ``ctxemb predict``).
"""

from __future__ import annotations

import importlib

from ctxemb.training.task import Task

__all__ = ["BUILTIN_TASKS_MODULE", "get_task", "register_task", "task_names", "unregister_task"]

#: The module that registers the built-in task families (imported on the first lookup).
BUILTIN_TASKS_MODULE = "ctxemb.tasks.builtin"

_REGISTRY: dict[str, Task] = {}
_BUILTINS_LOADED = False


def _tasks() -> dict[str, Task]:
    """The registry, with the built-in families registered first (once)."""
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True  # set first: a family's module may look a task up while it registers
        try:
            importlib.import_module(BUILTIN_TASKS_MODULE)
        except BaseException:
            _BUILTINS_LOADED = False  # the next lookup tries again (and raises again) rather than missing tasks
            raise
    return _REGISTRY


def register_task(task: Task, *, replace: bool = False) -> Task:
    """Add ``task`` to the registry under ``task.name``; returns it.

    Raises:
        TypeError: ``task`` is not a :class:`Task`.
        ValueError: no name, or the name is taken (pass ``replace=True`` to replace it).
    """
    if not isinstance(task, Task):
        raise TypeError(f"task must be a ctxemb.training.task.Task, got {type(task).__name__}")
    if not isinstance(task.name, str) or not task.name:
        raise ValueError(f"a task needs a non-empty name, got {task.name!r}")
    if task.name in _REGISTRY and not replace and _REGISTRY[task.name] is not task:
        raise ValueError(f"a task named {task.name!r} is already registered ({type(_REGISTRY[task.name]).__name__}); "
                         f"pass replace=True to replace it")
    _REGISTRY[task.name] = task
    return task


def unregister_task(name: str) -> None:
    """Remove a task (e.g. one a test registered)."""
    _REGISTRY.pop(name, None)


def get_task(name: str) -> Task:
    """The registered task called ``name``.

    Raises:
        KeyError: no such task (the message lists the registered ones).
    """
    tasks = _tasks()
    if name not in tasks:
        raise KeyError(f"no task named {name!r}; registered: {', '.join(sorted(tasks))}")
    return tasks[name]


def task_names(family: str | None = None, *, command: str | None = None) -> tuple[str, ...]:
    """The registered task names (of one ``family``, or trained by one CLI ``command``: ``"finetune"``,
    ``"pretrain"``, ``"wsd train"``), in registration order.

    """
    return tuple(n for n, t in _tasks().items()
                 if (family is None or t.family == family) and (command is None or t.command == command))
