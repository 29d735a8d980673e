"""Intermediate-task transfer (STILTs; Phang et al. 2018): train on a larger related task first, then on the target
task with a new head on that encoder.

A fine-tuning config's ``intermediate`` (a preset's ``[intermediate]`` table) holds the first run's settings:
``task`` and any field of that task's config, with ``train`` (``[intermediate.train]``) for its loop. The first run
goes to ``<out_dir>/intermediate`` with the target run's seed, precision, device and progress bar, from the target run's
``model``; the target run then starts from its model with ``new_head = True`` (see
:meth:`~ctxemb.modeling.sequence_classification.EncoderForSequenceClassification.from_pretrained`). A finished
intermediate run (its ``model/run.json`` present) is reused when the run is started again, so an interrupted
target run does not train it twice.

Example (RTE, 2,490 training pairs, after SNLI's 9,842 dev pairs), in a preset::

    head = "mean"
    [intermediate]
    task = "snli"
    train_split = "dev"
    eval_split = "test"
    epochs = 1.0
    head = "mean"
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Mapping

from ctxemb.training.registry import get_task
from ctxemb.training.task_config import loop_settings

logger = logging.getLogger(__name__)

__all__ = ["INTERMEDIATE_DIR", "intermediate_run"]

INTERMEDIATE_DIR = "intermediate"
# What the intermediate run takes from the target run's loop, whatever its own [train] says.
_SHARED_TRAIN = ("seed", "precision", "device", "progress_bar")


def intermediate_run(config) -> tuple[Any, Any]:
    """The intermediate run of ``config``: (its task, its config), validated; nothing is trained.

    Raises:
        ValueError: ``config.intermediate`` names an unknown task, nests another intermediate stage, or has a
            setting the task's config refuses.
    """
    spec = dict(config.intermediate)
    name = spec.pop("task")  # a str: FinetuneRunConfig checks it
    if spec.get("intermediate"):
        raise ValueError("an intermediate stage cannot have its own intermediate stage")
    try:
        task = get_task(name)
    except KeyError as e:
        raise ValueError(f"intermediate.task: {e.args[0] if e.args else e}") from None
    loop = spec.pop("train", None) or {}
    if not isinstance(loop, Mapping):
        raise ValueError(f"intermediate.train must be a table of loop settings; got {type(loop).__name__}")
    shared = {**{k: getattr(config.train, k) for k in _SHARED_TRAIN},
              "out_dir": str(Path(config.train.out_dir) / INTERMEDIATE_DIR), "resume": bool(config.train.resume)}
    fields = {f.name for f in dataclasses.fields(task.config_class)}
    unknown = sorted(set(spec) - fields)
    if unknown:
        raise ValueError(f"intermediate settings {unknown} do not apply to task {name!r} "
                         f"({task.config_class.__name__})")
    try:
        return task, task.config_class(task=name, model=spec.pop("model", config.model),
                                       train=loop_settings(task.config_class, loop, shared), **spec)
    except (TypeError, ValueError) as e:
        raise ValueError(f"intermediate ({name}): {e}") from None
