"""The built-in tasks by name, with their settings class and command, without importing the tasks (or torch): what
``ctxemb finetune --help``, ``ctxemb finetune TASK --help``, ``ctxemb pretrain`` and ``ctxemb wsd train`` read.

Each family folder under ``ctxemb/tasks/`` declares its tasks in its ``config`` module (``BUILTIN_TASKS``: name ->
settings class, and ``COMMAND``), which imports no torch; this module finds the folders and reads them. The
registry (:mod:`ctxemb.training.registry`, filled by :mod:`ctxemb.tasks.builtin`) holds the same names in the same
order (``tests/test_recipe_tasks.py`` checks it); a task registered from Python is known to the registry only.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = ["CatalogEntry", "FINETUNE_TASKS", "catalog", "families"]

_HERE = Path(__file__).parent


@dataclass(frozen=True)
class CatalogEntry:
    """A built-in task: its name, family (its folder), settings class and the command that trains it."""

    name: str
    family: str
    config_class: type
    command: str


def families() -> tuple[str, ...]:
    """The family folders that declare tasks (a ``config`` module with ``BUILTIN_TASKS``), in name order."""
    return tuple(m.name for m in pkgutil.iter_modules([str(_HERE)])
                 if m.ispkg and (_HERE / m.name / "config.py").is_file() and (_HERE / m.name / "task.py").is_file())


@cache
def catalog() -> dict[str, CatalogEntry]:
    """Every built-in task, by name, in family order (the registry's order)."""
    out: dict[str, CatalogEntry] = {}
    for family in families():
        module = importlib.import_module(f"{__package__}.{family}.config")
        for name, config_class in module.BUILTIN_TASKS.items():
            if name in out:
                raise ValueError(f"task {name!r} is declared by two families: {out[name].family} and {family}")
            out[name] = CatalogEntry(name, family, config_class, module.COMMAND)
    return out


#: The built-in tasks ``ctxemb finetune`` trains, in the registry's order.
FINETUNE_TASKS: tuple[str, ...] = tuple(n for n, e in catalog().items() if e.command == "finetune")
