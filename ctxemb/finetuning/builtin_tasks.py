"""The names of the built-in fine-tuning tasks, without importing the tasks: what ``ctxemb finetune --help`` lists.

The registry (:mod:`ctxemb.finetuning.registry`) imports every task module, and with them torch; these names come
from the settings modules, which import neither. They are the registry's built-in ``finetune`` tasks in its order
(``tests/test_recipe_tasks.py`` checks the two agree); a task registered from Python is still accepted, by the
registry itself.
"""

from __future__ import annotations

from ctxemb.finetuning.contrastive_config import CONTRASTIVE_TASKS
from ctxemb.finetuning.late_interaction_config import LATE_INTERACTION_TASKS
from ctxemb.finetuning.readers import TASKS
from ctxemb.finetuning.token_config import TOKEN_TASKS

__all__ = ["FINETUNE_TASKS"]

#: The built-in tasks ``ctxemb finetune`` trains: the sentence and pair tasks and ``custom``, the token and span
#: tasks, the contrastive ones, late interaction.
FINETUNE_TASKS: tuple[str, ...] = TASKS + ("custom",) + TOKEN_TASKS + CONTRASTIVE_TASKS + LATE_INTERACTION_TASKS
