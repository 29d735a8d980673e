"""The old import paths of moved modules, kept working for one release with a ``DeprecationWarning``.

The package was reorganised into packages that each hold one idea (``core``, ``models``, ``runtime``,
``embedding``, ``training``, ``tasks``; ``CHANGELOG.md`` lists every move). Importing a module by its old name gives
the module at its new place (the same module object, so every name in it works) and warns once, naming the new path.
:data:`MOVED` is the whole list; :func:`install` (called by ``import ctxemb``) puts the finder on ``sys.meta_path``.
Packages that no longer exist (``ctxemb.finetuning``, ``ctxemb.pretraining``) import as empty packages whose
submodules are the moved ones.
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
    "ctxemb.core.exchange": "ctxemb.core.exchange",
    "ctxemb.core.file_target": "ctxemb.core.file_target",
    "ctxemb.core.lazy": "ctxemb.core.lazy",
    "ctxemb.core.validation": "ctxemb.core.validation",
    "ctxemb.core.atomic": "ctxemb.core.atomic",
    "ctxemb.runtime.autoprecision": "ctxemb.runtime.autoprecision",
    "ctxemb.runtime.backends": "ctxemb.runtime.backends",
    "ctxemb.models.encoder_config": "ctxemb.models.encoder_config",
    "ctxemb.embedding.corpus": "ctxemb.embedding.embedder.corpus",
    "ctxemb.embedding.config": "ctxemb.embedding.embedder.config",
    "ctxemb.embedding.fill_mask": "ctxemb.embedding.embedder.fill_mask",
    "ctxemb.tasks.catalog": "ctxemb.tasks.catalog",
    "ctxemb.tasks.qa.cloze": "ctxemb.tasks.qa.cloze",
    "ctxemb.training.task_config": "ctxemb.training.task_config",
    "ctxemb.tasks.token.conll": "ctxemb.tasks.token.conll",
    "ctxemb.tasks.contrastive.task": "ctxemb.tasks.contrastive.task",
    "ctxemb.tasks.contrastive.config": "ctxemb.tasks.contrastive.config",
    "ctxemb.tasks.contrastive.data": "ctxemb.tasks.contrastive.data",
    "ctxemb.tasks.contrastive.mining": "ctxemb.tasks.contrastive.mining",
    "ctxemb.tasks.sequence.features": "ctxemb.tasks.sequence.features",
    "ctxemb.training.intermediate": "ctxemb.training.intermediate",
    "ctxemb.tasks.sequence.label_classes": "ctxemb.tasks.sequence.label_classes",
    "ctxemb.tasks.late_interaction.task": "ctxemb.tasks.late_interaction.task",
    "ctxemb.tasks.late_interaction.config": "ctxemb.tasks.late_interaction.config",
    "ctxemb.tasks.outputs": "ctxemb.tasks.outputs",
    "ctxemb.tasks.passages": "ctxemb.tasks.passages",
    "ctxemb.tasks.sequence.predict": "ctxemb.tasks.sequence.predict",
    "ctxemb.tasks.predict_files": "ctxemb.tasks.predict_files",
    "ctxemb.tasks.predictor": "ctxemb.tasks.predictor",
    "ctxemb.tasks.qa.features": "ctxemb.tasks.qa.features",
    "ctxemb.tasks.qa.tables": "ctxemb.tasks.qa.tables",
    "ctxemb.tasks.sequence.data": "ctxemb.tasks.sequence.data",
    "ctxemb.training.registry": "ctxemb.training.registry",
    "ctxemb.training.runner": "ctxemb.training.runner",
    "ctxemb.tasks.sequence.config": "ctxemb.tasks.sequence.config",
    "ctxemb.tasks.qa.squad": "ctxemb.tasks.qa.squad",
    "ctxemb.io.tables": "ctxemb.io.tables",
    "ctxemb.tasks.token.tagged_tables": "ctxemb.tasks.token.tagged_tables",
    "ctxemb.tasks.token.features": "ctxemb.tasks.token.features",
    "ctxemb.training.task": "ctxemb.training.task",
    "ctxemb.tasks.sequence.task": "ctxemb.tasks.sequence.task",
    "ctxemb.io.text_files": "ctxemb.io.text_files",
    "ctxemb.tasks.token.config": "ctxemb.tasks.token.config",
    "ctxemb.tasks.token.predict": "ctxemb.tasks.token.predict",
    "ctxemb.tasks.token.task": "ctxemb.tasks.token.task",
    "ctxemb.training.trials": "ctxemb.training.trials",
    "ctxemb.runtime.engine": "ctxemb.runtime.engine",
    "ctxemb.runtime.int8_calibration": "ctxemb.runtime.int8_calibration",
    "ctxemb.runtime.kernels": "ctxemb.runtime.kernels",
    "ctxemb.core.lexical_text": "ctxemb.core.lexical_text",
    "ctxemb.modeling.loading": "ctxemb.modeling.loading",
    "ctxemb.core.locks": "ctxemb.core.locks",
    "ctxemb.models.head_options": "ctxemb.models.head_options",
    "ctxemb.core.paths": "ctxemb.core.paths",
    "ctxemb.core.precision": "ctxemb.core.precision",
    "ctxemb.tasks.pretraining.batches": "ctxemb.tasks.pretraining.batches",
    "ctxemb.tasks.pretraining.config": "ctxemb.tasks.pretraining.config",
    "ctxemb.tasks.pretraining.mask_distributions": "ctxemb.tasks.pretraining.mask_distributions",
    "ctxemb.tasks.pretraining.masking": "ctxemb.tasks.pretraining.masking",
    "ctxemb.tasks.pretraining.masking_config": "ctxemb.tasks.pretraining.masking_config",
    "ctxemb.tasks.pretraining.recipe": "ctxemb.tasks.pretraining.recipe",
    "ctxemb.tasks.pretraining.sampling": "ctxemb.tasks.pretraining.sampling",
    "ctxemb.tasks.pretraining.sequences": "ctxemb.tasks.pretraining.sequences",
    "ctxemb.tasks.pretraining.shards": "ctxemb.tasks.pretraining.shards",
    "ctxemb.tasks.pretraining.task": "ctxemb.tasks.pretraining.task",
    "ctxemb.tasks.pretraining.vocab": "ctxemb.tasks.pretraining.vocab",
    "ctxemb.core.protocols": "ctxemb.core.protocols",
    "ctxemb.runtime.int8": "ctxemb.runtime.int8",
    "ctxemb.models.hub": "ctxemb.models.hub",
    "ctxemb.embedding.st_fit": "ctxemb.embedding.embedder.st_fit",
    "ctxemb.embedding.st_format": "ctxemb.embedding.embedder.st_format",
    "ctxemb.embedding.st_writer": "ctxemb.embedding.embedder.st_writer",
    "ctxemb.core.sentences": "ctxemb.core.sentences",
    "ctxemb.models.tokenization": "ctxemb.models.tokenization",
    "ctxemb.runtime.distributed": "ctxemb.runtime.distributed",
    "ctxemb.tasks.sense.batches": "ctxemb.tasks.sense.batches",
    "ctxemb.tasks.sense.inventory": "ctxemb.tasks.sense.inventory",
    "ctxemb.tasks.sense.task": "ctxemb.tasks.sense.task",
    "ctxemb.tasks.sense.training": "ctxemb.tasks.sense.training",
    "ctxemb.wsd.options": "ctxemb.wsd.options",
    "ctxemb.tasks.sense.config": "ctxemb.tasks.sense.config",
}

#: packages that were removed: old name -> where their modules went (for the warning)
REMOVED_PACKAGES: dict[str, str] = {
    "ctxemb.finetuning": "ctxemb.tasks",
    "ctxemb.pretraining": "ctxemb.tasks.pretraining",
}


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new place (the same object)."""

    def __init__(self, new: str | None):
        self.new = new

    def create_module(self, spec):
        if self.new is None:  # a removed package: an empty one, so that its moved submodules import
            module = types.ModuleType(spec.name, f"Removed; its modules moved to {REMOVED_PACKAGES[spec.name]}.")
            module.__path__ = []
            return module
        return importlib.import_module(self.new)

    def exec_module(self, module) -> None:
        pass


class _OldNames(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in MOVED:
            warnings.warn(f"{name} moved to {MOVED[name]}; import it from there (the old path goes in a later "
                          f"release)", DeprecationWarning, stacklevel=_caller_level())
            return importlib.util.spec_from_loader(name, _Alias(MOVED[name]))
        if name in REMOVED_PACKAGES:
            return importlib.machinery.ModuleSpec(name, _Alias(None), is_package=True)
        return None


def _caller_level() -> int:
    """The stack level of the import statement that named the old path (past importlib's own frames)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                 or frame.f_code.co_filename == __file__):
        frame, level = frame.f_back, level + 1
    return level


def install() -> None:
    """Put the finder of old names on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _OldNames) for f in sys.meta_path):
        sys.meta_path.append(_OldNames())
