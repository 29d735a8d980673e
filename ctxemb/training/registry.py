"""The one registry of training tasks: name -> :class:`~ctxemb.training.task.Task` (fine-tuning, pretraining and,
once :mod:`ctxemb.wsd` is imported, sense training).

The built-in tasks are registered at the bottom of this module, one line per task; a user's task registers with
:func:`register_task` and then trains, saves and predicts through the same path (``ctxemb finetune NAME``,
:func:`ctxemb.training.runner.run_task`, ``ctxemb predict``). A new built-in family of ``ctxemb finetune`` also
joins :data:`ctxemb.tasks.catalog.FINETUNE_TASKS`, the names its ``--help`` lists without importing this
module (which imports every task, and torch).
"""

from __future__ import annotations

from ctxemb.tasks.contrastive.task import CONTRASTIVE_TASKS, ContrastiveTask
from ctxemb.tasks.late_interaction.task import LATE_INTERACTION_TASKS, LateInteractionTask
from ctxemb.training.task import Task, TaskData
from ctxemb.tasks.sequence.task import TASKS, SequenceTask
from ctxemb.tasks.token.task import TOKEN_TASKS, TokenTask
from ctxemb.tasks.pretraining.task import PRETRAINING_TASKS

__all__ = ["Task", "TaskData", "get_task", "register_task", "task_names", "unregister_task"]

_REGISTRY: dict[str, Task] = {}


def register_task(task: Task, *, replace: bool = False) -> Task:
    """Add ``task`` to the registry under ``task.name``; returns it.

    Raises:
        TypeError: ``task`` is not a :class:`Task`.
        ValueError: no name, or the name is taken (pass ``replace=True`` to replace it).
    """
    if not isinstance(task, Task):
        raise TypeError(f"task must be a ctxemb.training.registry.Task, got {type(task).__name__}")
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
    if name not in _REGISTRY:
        raise KeyError(f"no fine-tuning task named {name!r}; registered: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def task_names(family: str | None = None, *, command: str | None = None) -> tuple[str, ...]:
    """The registered task names (of one ``family``, or trained by one CLI ``command``: ``"finetune"``,
    ``"pretrain"``, ``"wsd train"``), in registration order.

    The sense-training family (``wsd-bem``, ``wsd-supcon``) registers when :mod:`ctxemb.wsd` is imported: this
    module cannot import it (imports point down, and WSD sits above fine-tuning).
    """
    return tuple(n for n, t in _REGISTRY.items()
                 if (family is None or t.family == family) and (command is None or t.command == command))


# ---- the built-in tasks: GLUE-style sequence tasks and a user's own table, CoNLL tagging (BIO softmax/CRF, span
# NER with --head span) and SQuAD-format QA; the pretraining objectives (ctxemb pretrain)
for _name in TASKS + ("custom",):
    register_task(SequenceTask(_name))
for _name in TOKEN_TASKS:
    register_task(TokenTask(_name))
for _task in PRETRAINING_TASKS.values():
    register_task(_task)
for _name in CONTRASTIVE_TASKS:
    register_task(ContrastiveTask(_name))
for _name in LATE_INTERACTION_TASKS:
    register_task(LateInteractionTask(_name))
