"""Multiple choice as a task of the registry: ``ctxemb finetune multiple-choice --train-file ... --dev-file ...``.

The model is :class:`~ctxemb.modeling.multiple_choice.EncoderForMultipleChoice` (BERT's pooler, one score per
choice, cross-entropy over the choices; transformers' ``AutoModelForMultipleChoice`` loads the saved directory).
The dev evaluation reports accuracy; predictions are the index of the chosen answer with each choice's probability.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from ctxemb.metrics.classification import accuracy
from ctxemb.modeling.multiple_choice import EncoderForMultipleChoice
from ctxemb.models.hub import resolve_model_dir
from ctxemb.tasks.multiple_choice.config import BUILTIN_TASKS, MultipleChoiceConfig
from ctxemb.tasks.multiple_choice.data import question_from_input, read_questions
from ctxemb.tasks.multiple_choice.features import ChoiceCollator, encode_questions
from ctxemb.training.data import EvalBatches, move_to_device
from ctxemb.training.task import Task, TaskData

__all__ = ["MultipleChoiceTask", "builtin_tasks", "choice_logits"]


class MultipleChoiceTask(Task):
    """Multiple-choice questions from tables (config: :class:`MultipleChoiceConfig`); primary metric accuracy."""

    family = "multiple_choice"
    primary_metric = "accuracy"
    config_class = MultipleChoiceConfig

    def __init__(self, name: str = "multiple-choice"):
        self.name = name
        self.description = "multiple choice over a table's (context, choices, label) rows"

    def read(self, config: MultipleChoiceConfig) -> TaskData:
        columns = dict(context=config.context, choices=config.choices, label=config.label)
        return TaskData(train=read_questions(config.train_file, **columns, split=config.train_split),
                        eval=read_questions(config.dev_file, **columns, split=config.eval_split))

    def build_model(self, config: MultipleChoiceConfig, data: TaskData) -> EncoderForMultipleChoice:
        return config.apply_regime(EncoderForMultipleChoice.from_pretrained(resolve_model_dir(config.model)))

    def encode(self, config: MultipleChoiceConfig, tokenizer, examples, data: TaskData):
        return (encode_questions(tokenizer, examples, max_length=config.max_length),
                ChoiceCollator(tokenizer.pad_token_id))

    def evaluator(self, config: MultipleChoiceConfig, tokenizer, data: TaskData, features, collate):
        batches = EvalBatches(features, batch_size=max(config.batch_size, 32), collate=collate)
        gold = np.array([q.label for q in data.eval])
        return lambda m: {"accuracy": 100 * accuracy(gold, choice_logits(m, batches).argmax(-1))}

    def load(self, model_dir) -> EncoderForMultipleChoice:
        return EncoderForMultipleChoice.from_pretrained(resolve_model_dir(model_dir))

    def predict(self, model, tokenizer, inputs: Sequence, saved: dict[str, Any]) -> list[dict[str, Any]]:
        """For each input (a mapping with the saved context and choices columns): the chosen index and each
        choice's probability."""
        columns = dict(context=saved.get("context", "context"), choices=saved.get("choices", "choices"))
        questions = [question_from_input(value, i, **columns) for i, value in enumerate(inputs)]
        features = encode_questions(tokenizer, questions, max_length=saved.get("max_length", 128))
        logits = choice_logits(model, EvalBatches(features, batch_size=32,
                                                  collate=ChoiceCollator(tokenizer.pad_token_id)))
        probs = torch.softmax(torch.from_numpy(logits), dim=-1).numpy()
        return [{"choice": int(p.argmax()), "probabilities": [round(float(x), 6) for x in p]} for p in probs]


@torch.inference_mode()
def choice_logits(model: EncoderForMultipleChoice, batches) -> np.ndarray:
    """The (N, C) choice scores over ``batches`` (in dataset order), the model left in the mode it was in."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = [model(**{k: v for k, v in move_to_device(b, device).items() if k != "labels"}).logits.float().cpu()
           for b in batches]
    model.train(was_training)
    return torch.cat(out).numpy()


def builtin_tasks() -> list[MultipleChoiceTask]:
    """This family's tasks, for the registry (:mod:`ctxemb.tasks.builtin`)."""
    return [MultipleChoiceTask(name) for name in BUILTIN_TASKS]
