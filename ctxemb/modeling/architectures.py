"""The one place that names a model's class for transformers (``architectures`` in ``config.json``).

transformers names a task model ``<Family>For<Task>`` (``BertForSequenceClassification``, ``MPNetForMaskedLM``)
and a bare encoder ``<Family>Model``; the bare names per ``model_type`` are
:data:`ctxemb.models.encoder_config._ARCHITECTURE_NAMES` (where encoder families are added), the task suffixes are here.
:func:`architecture_name` writes a name, :func:`architecture_task` reads one back (what ``ctxemb predict``
dispatches on).
"""

from __future__ import annotations

from typing import Literal, get_args

from ctxemb.core.validation import check_choice
from ctxemb.models.encoder_config import _ARCHITECTURE_NAMES

ArchitectureTask = Literal["bare", "masked_lm", "pretraining", "sequence_classification", "token_classification",
                           "question_answering", "multiple_choice"]
ARCHITECTURE_TASKS: tuple[str, ...] = get_args(ArchitectureTask)
_SUFFIXES: dict[str, str] = {"bare": "Model", "masked_lm": "ForMaskedLM", "pretraining": "ForPreTraining",
                             "sequence_classification": "ForSequenceClassification",
                             "token_classification": "ForTokenClassification",
                             "question_answering": "ForQuestionAnswering", "multiple_choice": "ForMultipleChoice"}


def architecture_name(model_type: str, task: str = "bare") -> str:
    """transformers' class name for a ``model_type`` and a task, e.g. ``("roberta", "token_classification")`` ->
    ``"RobertaForTokenClassification"``.

    Raises:
        ValueError: an unknown model type or task.
    """
    check_choice(task, "task", ARCHITECTURE_TASKS)
    check_choice(model_type, "model_type", sorted(_ARCHITECTURE_NAMES))
    bare = _ARCHITECTURE_NAMES[model_type]
    return bare[:-len("Model")] + _SUFFIXES[task]


def architecture_task(name: str) -> str | None:
    """The task of a transformers class name (``"BertForQuestionAnswering"`` -> ``"question_answering"``;
    ``"BertModel"`` -> ``"bare"``), or None for a name of another form."""
    for task, suffix in sorted(_SUFFIXES.items(), key=lambda kv: -len(kv[1])):
        if task != "bare" and name.endswith(suffix):
            return task
    return "bare" if name.endswith("Model") else None
