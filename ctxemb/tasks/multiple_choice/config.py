"""The settings of a multiple-choice run (:class:`MultipleChoiceConfig`) and the family's task names, in a module
that imports no torch: ``ctxemb finetune multiple-choice --help`` builds its flags from it at once."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxemb.models.encoder_config import field_help as _meta
from ctxemb.training.task_config import FinetuneRunConfig

__all__ = ["BUILTIN_TASKS", "COMMAND", "MultipleChoiceConfig"]


@dataclass
class MultipleChoiceConfig(FinetuneRunConfig):
    """A multiple-choice run on a user's tables (``train_file``, ``dev_file``): one question per row, with a context,
    a list of choices (every row of a file has the same number) and the index of the right one.

    Attributes:
        context: the column of the context (the first text of each pair).
        choices: the column of the choices: a list of strings per row (the second texts).
        label: the column of the right choice's index (0-based; absent when predicting).
    """

    context: str = field(default="context", metadata=_meta("the context's column"))
    choices: str = field(default="choices", metadata=_meta("the column holding each row's list of choices"))
    label: str = field(default="label", metadata=_meta("the column of the right choice's index (0-based)"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.train_file and self.dev_file):
            raise ValueError("multiple-choice trains on tables: give train_file and dev_file (JSONL, JSON, Parquet "
                             "or a datasets directory; one row per question)")


# ---- what this family contributes to the catalog (ctxemb.tasks.catalog reads it without importing torch)
#: The command that trains this family's tasks.
COMMAND = "finetune"
#: The built-in tasks of this family, by name, and the settings class each trains with.
BUILTIN_TASKS: dict[str, type] = {"multiple-choice": MultipleChoiceConfig}
