"""The names of the built-in fine-tuning tasks, without importing the tasks: what ``ctxemb finetune --help`` lists.

The registry (:mod:`ctxemb.training.registry`) imports every task module, and with them torch; these names come
from the settings modules, which import neither. They are the registry's built-in ``finetune`` tasks in its order
(``tests/test_recipe_tasks.py`` checks the two agree); a task registered from Python is still accepted, by the
registry itself.
"""

from __future__ import annotations

from ctxemb.tasks.contrastive.config import CONTRASTIVE_TASKS
from ctxemb.tasks.late_interaction.config import LATE_INTERACTION_TASKS
from ctxemb.tasks.sequence.data import TASKS
from ctxemb.tasks.token.config import TOKEN_TASKS

__all__ = ["FINETUNE_TASKS"]

#: The built-in tasks ``ctxemb finetune`` trains: the sentence and pair tasks and ``custom``, the token and span
#: tasks, the contrastive ones, late interaction.
FINETUNE_TASKS: tuple[str, ...] = TASKS + ("custom",) + TOKEN_TASKS + CONTRASTIVE_TASKS + LATE_INTERACTION_TASKS
