"""Registers every built-in task family with the one registry (:mod:`ctxemb.training.registry` imports this module
on its first lookup, so the registry is complete whatever the caller imported).

A family is a folder under ``ctxemb/tasks/`` with a ``config`` module (its settings and ``BUILTIN_TASKS``, read by
:mod:`ctxemb.tasks.catalog` without torch) and a ``task`` module whose ``builtin_tasks()`` returns its
:class:`~ctxemb.training.task.Task` objects. Adding a folder adds its tasks: nothing here names a family.
"""

from __future__ import annotations

import importlib

from ctxemb.tasks.catalog import catalog, families
from ctxemb.training.registry import register_task


def _register_all() -> None:
    declared = catalog()
    for family in families():
        for task in importlib.import_module(f"{__package__}.{family}.task").builtin_tasks():
            entry = declared.get(task.name)
            if entry is None or entry.family != family or not issubclass(entry.config_class, task.config_class):
                raise RuntimeError(f"task {task.name!r} of ctxemb/tasks/{family}/task.py is not declared as such in "
                                   f"ctxemb/tasks/{family}/config.py's BUILTIN_TASKS")
            register_task(task)


_register_all()
