"""The old import paths of moved modules, kept working for one release with a ``DeprecationWarning``.

The package was reorganised into packages that each hold one idea (``core``, ``models``, ``runtime``,
``embedding``, ``training``, ``tasks``; ``CHANGELOG.md`` lists every move). Importing a module by its old name gives
the module at its new place (the same module object, so every name in it works) and warns once, naming the new path.
:data:`MOVED` is the whole list; :func:`install` (called by ``import ctxemb``) puts the finder on ``sys.meta_path``.
Packages that no longer exist (``ctxemb.finetuning``, ``ctxemb.pretraining``) import as empty packages whose
submodules are the moved ones.

A few old modules lost names besides moving: the per-family run functions (``run_finetuning``,
``run_token_finetuning``, ``run_pretraining``, ``run_sense_training``, the intermediate stage's ``train``) and their
result types, which :func:`ctxemb.training.runner.run_task` and its one
:class:`~ctxemb.training.recipe.RunResult` replace, and names a module only re-exported. Such a module imports as a
stand-in (:data:`STAND_INS`) that looks a name up in the new module, then in the modules that define the re-exported
names, and holds the old functions as thin calls of :func:`~ctxemb.training.runner.run_task` (each warns when
called).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings

#: old module name -> its new place
MOVED: dict[str, str] = {
    "ctxemb._exchange": "ctxemb.core.exchange",
    "ctxemb._file_target": "ctxemb.core.file_target",
    "ctxemb._lazy": "ctxemb.core.lazy",
    "ctxemb._validation": "ctxemb.core.validation",
    "ctxemb.atomic": "ctxemb.core.atomic",
    "ctxemb.autoprecision": "ctxemb.runtime.autoprecision",
    "ctxemb.backends": "ctxemb.runtime.backends",
    "ctxemb.config": "ctxemb.models.encoder_config",
    "ctxemb.corpus_embedding": "ctxemb.embedding.corpus",
    "ctxemb.embedder_config": "ctxemb.embedding.config",
    "ctxemb.fill_mask": "ctxemb.embedding.fill_mask",
    "ctxemb.finetuning.builtin_tasks": "ctxemb.tasks.catalog",
    "ctxemb.finetuning.cloze_qa": "ctxemb.tasks.qa.cloze",
    "ctxemb.finetuning.config": "ctxemb.training.task_config",
    "ctxemb.finetuning.conll": "ctxemb.tasks.token.conll",
    "ctxemb.finetuning.contrastive": "ctxemb.tasks.contrastive.task",
    "ctxemb.finetuning.contrastive_config": "ctxemb.tasks.contrastive.config",
    "ctxemb.finetuning.contrastive_data": "ctxemb.tasks.contrastive.data",
    "ctxemb.finetuning.contrastive_mining": "ctxemb.tasks.contrastive.mining",
    "ctxemb.finetuning.features": "ctxemb.tasks.sequence.features",
    "ctxemb.finetuning.intermediate": "ctxemb.training.intermediate",
    "ctxemb.finetuning.label_classes": "ctxemb.tasks.sequence.label_classes",
    "ctxemb.finetuning.late_interaction": "ctxemb.tasks.late_interaction.task",
    "ctxemb.finetuning.late_interaction_config": "ctxemb.tasks.late_interaction.config",
    "ctxemb.finetuning.outputs": "ctxemb.training.outputs",
    "ctxemb.finetuning.passages": "ctxemb.tasks.passages",
    "ctxemb.finetuning.predict": "ctxemb.tasks.sequence.predict",
    "ctxemb.finetuning.predict_files": "ctxemb.tasks.predict_files",
    "ctxemb.finetuning.predictor": "ctxemb.tasks.predictor",
    "ctxemb.finetuning.qa": "ctxemb.tasks.qa.features",
    "ctxemb.finetuning.qa_tables": "ctxemb.tasks.qa.tables",
    "ctxemb.finetuning.readers": "ctxemb.tasks.sequence.data",
    "ctxemb.finetuning.registry": "ctxemb.training.registry",
    "ctxemb.finetuning.runner": "ctxemb.training.runner",
    "ctxemb.finetuning.sequence_config": "ctxemb.tasks.sequence.config",
    "ctxemb.finetuning.squad": "ctxemb.tasks.qa.squad",
    "ctxemb.finetuning.tables": "ctxemb.io.tables",
    "ctxemb.finetuning.tagged_tables": "ctxemb.tasks.token.tagged_tables",
    "ctxemb.finetuning.tagging": "ctxemb.tasks.token.features",
    "ctxemb.finetuning.task": "ctxemb.training.task",
    "ctxemb.finetuning.tasks": "ctxemb.tasks.sequence.task",
    "ctxemb.finetuning.text_files": "ctxemb.io.text_files",
    "ctxemb.finetuning.token_config": "ctxemb.tasks.token.config",
    "ctxemb.finetuning.token_predict": "ctxemb.tasks.token.predict",
    "ctxemb.finetuning.token_tasks": "ctxemb.tasks.token.task",
    "ctxemb.finetuning.trials": "ctxemb.training.trials",
    "ctxemb.inference": "ctxemb.runtime.engine",
    "ctxemb.int8_calibration": "ctxemb.runtime.int8_calibration",
    "ctxemb.kernels": "ctxemb.runtime.kernels",
    "ctxemb.lexical_text": "ctxemb.core.lexical_text",
    "ctxemb.loading": "ctxemb.modeling.loading",
    "ctxemb.locks": "ctxemb.core.locks",
    "ctxemb.modeling_options": "ctxemb.models.head_options",
    "ctxemb.paths": "ctxemb.core.paths",
    "ctxemb.precision": "ctxemb.core.precision",
    "ctxemb.pretraining.batches": "ctxemb.tasks.pretraining.batches",
    "ctxemb.pretraining.config": "ctxemb.tasks.pretraining.config",
    "ctxemb.pretraining.mask_distributions": "ctxemb.tasks.pretraining.mask_distributions",
    "ctxemb.pretraining.masking": "ctxemb.tasks.pretraining.masking",
    "ctxemb.pretraining.masking_config": "ctxemb.tasks.pretraining.masking_config",
    "ctxemb.pretraining.recipe": "ctxemb.tasks.pretraining.task",
    "ctxemb.pretraining.sampling": "ctxemb.tasks.pretraining.sampling",
    "ctxemb.pretraining.sequences": "ctxemb.tasks.pretraining.sequences",
    "ctxemb.pretraining.shards": "ctxemb.tasks.pretraining.shards",
    "ctxemb.pretraining.task": "ctxemb.tasks.pretraining.task",
    "ctxemb.pretraining.vocab": "ctxemb.tasks.pretraining.vocab",
    "ctxemb.protocols": "ctxemb.core.protocols",
    "ctxemb.quantization": "ctxemb.runtime.int8",
    "ctxemb.registry": "ctxemb.models.hub",
    "ctxemb.sentence_transformers_fit": "ctxemb.embedding.st_fit",
    "ctxemb.sentence_transformers_format": "ctxemb.embedding.st_format",
    "ctxemb.sentence_transformers_writer": "ctxemb.embedding.st_writer",
    "ctxemb.sentences": "ctxemb.core.sentences",
    "ctxemb.tokenization": "ctxemb.models.tokenization",
    "ctxemb.training.distributed": "ctxemb.runtime.distributed",
    "ctxemb.wsd.sense_batches": "ctxemb.tasks.sense.batches",
    "ctxemb.wsd.sense_config": "ctxemb.tasks.sense.inventory",
    "ctxemb.wsd.sense_task": "ctxemb.tasks.sense.task",
    "ctxemb.wsd.training": "ctxemb.tasks.sense.training",
    "ctxemb.wsd_options": "ctxemb.wsd.options",
    "ctxemb.wsd_train_options": "ctxemb.tasks.sense.config",
}

#: packages that were removed: old name -> where their modules went (for the warning)
REMOVED_PACKAGES: dict[str, str] = {
    "ctxemb.finetuning": "ctxemb.tasks",
    "ctxemb.pretraining": "ctxemb.tasks.pretraining",
}


#: old modules that import as stand-ins: old name -> the modules a name is looked up in, in order (the first is
#: where the module moved)
STAND_INS: dict[str, tuple[str, ...]] = {
    "ctxemb.finetuning.tasks": ("ctxemb.tasks.sequence.task", "ctxemb.tasks.sequence.config",
                                "ctxemb.tasks.sequence.data", "ctxemb.tasks.sequence.features",
                                "ctxemb.training.outputs", "ctxemb.training.task_config"),
    "ctxemb.finetuning.token_tasks": ("ctxemb.tasks.token.task", "ctxemb.tasks.token.config",
                                      "ctxemb.tasks.token.features", "ctxemb.training.task_config"),
    "ctxemb.finetuning.runner": ("ctxemb.training.runner", "ctxemb.training.task"),
    "ctxemb.finetuning.intermediate": ("ctxemb.training.intermediate",),
    "ctxemb.finetuning.registry": ("ctxemb.training.registry", "ctxemb.training.task"),
    "ctxemb.pretraining.recipe": ("ctxemb.tasks.pretraining.task", "ctxemb.tasks.pretraining.config",
                                  "ctxemb.training.recipe"),
    "ctxemb.wsd.training": ("ctxemb.tasks.sense.training", "ctxemb.tasks.sense.task",
                            "ctxemb.tasks.sense.inventory", "ctxemb.tasks.sense.batches",
                            "ctxemb.tasks.sense.config", "ctxemb.training.recipe"),
    "ctxemb.wsd.sense_config": ("ctxemb.tasks.sense.inventory", "ctxemb.tasks.sense.config"),
    "ctxemb.finetuning.tables": ("ctxemb.io.tables", "ctxemb.io.text_files"),
    "ctxemb.backends": ("ctxemb.runtime.backends", "ctxemb.runtime.token_budget"),
    "ctxemb.quantization": ("ctxemb.runtime.int8", "ctxemb.runtime.int8_calibration"),
    "ctxemb.inference": ("ctxemb.runtime.engine", "ctxemb.core.precision"),
    "ctxemb.paths": ("ctxemb.core.paths", "ctxemb.core.atomic"),
}

#: names a stand-in answers under their old spelling: old module -> {old name: the name at the new place}
RENAMED: dict[str, dict[str, str]] = {
    "ctxemb.inference": {"PRECISIONS": "INFERENCE_PRECISIONS", "PRECISION_CHOICES": "INFERENCE_PRECISION_CHOICES",
                         "Precision": "InferencePrecision"},
}


def _deprecated_call(old: str, new: str) -> None:
    warnings.warn(f"{old} is replaced by {new}", DeprecationWarning, stacklevel=3)


def run_finetuning(config):
    """``run_task(get_task(config.task), config)``: the old sequence-task entry."""
    _deprecated_call("run_finetuning(config)", "ctxemb.training.runner.run_task(get_task(config.task), config)")
    return _run_named(config.task, config)


def run_token_finetuning(config):
    """``run_task(get_task(config.task), config)``: the old token-task entry."""
    _deprecated_call("run_token_finetuning(config)", "ctxemb.training.runner.run_task(get_task(config.task), config)")
    return _run_named(config.task, config)


def run_pretraining(config):
    """The loop's result of ``run_task(task_for_config(config), config)``: the old pretraining entry."""
    _deprecated_call("run_pretraining(config)", "ctxemb.training.runner.run_task(task_for_config(config), config)")
    from ctxemb.tasks.pretraining.task import task_for_config
    from ctxemb.training.runner import run_task

    return run_task(task_for_config(config), config).train


def run_pretraining_recipe(config):
    """``run_task(task_for_config(config), config)``."""
    _deprecated_call("run_pretraining_recipe(config)",
                     "ctxemb.training.runner.run_task(task_for_config(config), config)")
    from ctxemb.tasks.pretraining.task import task_for_config
    from ctxemb.training.runner import run_task

    return run_task(task_for_config(config), config)


def run_sense_training(config, *, corpus=None, inventory=None, callbacks=None):
    """``run_task(SenseTask(config.recipe, corpus=..., inventory=...), config)``: the old sense-training entry. The
    result also answers the old result's ``embedder_options`` and ``stats``."""
    _deprecated_call("run_sense_training(config)",
                     "ctxemb.training.runner.run_task(get_task(f'wsd-{config.recipe}'), config)")
    from ctxemb.tasks.sense.task import SENSE_TASKS, SenseTask
    from ctxemb.training.runner import run_task

    task = SENSE_TASKS[config.recipe] if corpus is None and inventory is None else \
        SenseTask(config.recipe, corpus=corpus, inventory=inventory)
    result = run_task(task, config, callbacks=list(callbacks or []))
    result.embedder_options = config.embedder_options()
    result.stats = result.data.info["stats"]
    return result


def train(task, config):
    """``run_task(task, config)`` (the intermediate stage is a setting of the run)."""
    _deprecated_call("ctxemb.finetuning.intermediate.train(task, config)", "ctxemb.training.runner.run_task")
    from ctxemb.training.runner import run_task

    return run_task(task, config)


def _run_named(name, config):
    from ctxemb.training.registry import get_task
    from ctxemb.training.runner import run_task

    return run_task(get_task(name), config)


def _run_result():
    from ctxemb.training.recipe import RunResult

    return RunResult


#: names the stand-ins hold themselves (functions above; result types: the one RunResult)
_OWN: dict[str, dict[str, object]] = {
    "ctxemb.finetuning.tasks": {"run_finetuning": run_finetuning, "FinetuneResult": _run_result},
    "ctxemb.finetuning.token_tasks": {"run_token_finetuning": run_token_finetuning,
                                      "TokenFinetuneResult": _run_result},
    "ctxemb.finetuning.runner": {"TaskRun": _run_result},
    "ctxemb.finetuning.intermediate": {"train": train},
    "ctxemb.pretraining.recipe": {"run_pretraining": run_pretraining, "run_pretraining_recipe": run_pretraining_recipe},
    "ctxemb.wsd.training": {"run_sense_training": run_sense_training, "SenseTrainResult": _run_result},
}


def _stand_in(name: str) -> types.ModuleType:
    """A module for the old ``name``: its names looked up in :data:`STAND_INS` order, plus its own (:data:`_OWN`)."""
    module = types.ModuleType(name, f"Moved: see {STAND_INS[name][0]}.")
    own = _OWN.get(name, {})

    def __getattr__(attr: str):
        if attr in own:
            value = own[attr]
            return value() if value is _run_result else value
        attr_now = RENAMED.get(name, {}).get(attr, attr)
        for where in STAND_INS[name]:
            target = importlib.import_module(where)
            if hasattr(target, attr_now):
                return getattr(target, attr_now)
        raise AttributeError(f"module {name!r} (moved to {STAND_INS[name][0]}) has no attribute {attr!r}")

    module.__getattr__ = __getattr__
    return module


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new place (the same object), or as a stand-in."""

    def __init__(self, new: str | None):
        self.new = new

    def create_module(self, spec):
        if self.new is None:  # a removed package: an empty one, so that its moved submodules import
            module = types.ModuleType(spec.name, f"Removed; its modules moved to {REMOVED_PACKAGES[spec.name]}.")
            module.__path__ = []
            return module
        if spec.name in STAND_INS:
            return _stand_in(spec.name)
        return importlib.import_module(self.new)

    def exec_module(self, module) -> None:
        pass


class _OldNames(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in MOVED:
            warnings.warn(f"{name} moved to {MOVED[name]}; import it from there (the old path goes in a later "
                          f"release)", DeprecationWarning, stacklevel=2)
            return importlib.util.spec_from_loader(name, _Alias(MOVED[name]))
        if name in REMOVED_PACKAGES:
            return importlib.machinery.ModuleSpec(name, _Alias(None), is_package=True)
        return None


def install() -> None:
    """Put the finder of old names on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _OldNames) for f in sys.meta_path):
        sys.meta_path.append(_OldNames())
