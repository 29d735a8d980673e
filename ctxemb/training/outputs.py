"""A model's outputs over evaluation batches, in the examples' order and without padding, with the dev
evaluation's progress bar: what every task's evaluator and predictor read (the token family decodes them into tags
and spans in :mod:`ctxemb.tasks.token.outputs`).

Shapes: N examples, C classes, T_i tokens of feature i.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from ctxemb.modeling.base import EncoderWithHeads
from ctxemb.training.data import move_to_device, restore_order

__all__ = ["EVAL_BAR_MIN_EXAMPLES", "eval_bar", "model_logits", "predict_outputs"]

# A dev evaluation of fewer examples shows no progress bar: a few texts are done before a bar is worth drawing.
EVAL_BAR_MIN_EXAMPLES = 100


def eval_bar(total: int, *, show: bool, examples: int, desc: str = "dev", unit: str = "batch"):
    """A tqdm bar on stderr over the ``total`` steps of a dev evaluation of ``examples`` examples. It shows when
    ``show`` (the run's ``progress_bar``), on rank 0, for at least :data:`EVAL_BAR_MIN_EXAMPLES` examples; it draws
    under the training bar and clears itself when done. Call ``update(n)`` and ``close()``."""
    import torch.distributed as dist
    from tqdm.auto import tqdm

    main = not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
    return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, file=sys.stderr,
                disable=not (show and main and examples >= EVAL_BAR_MIN_EXAMPLES))


def _batches_bar(batches, progress: bool | str):
    """``eval_bar`` over the batches of an :class:`~ctxemb.training.data.EvalBatches` (None without ``progress``)."""
    if not progress or not hasattr(batches, "__len__"):
        return None
    examples = len(getattr(batches, "order", ())) or len(batches)
    return eval_bar(len(batches), show=True, examples=examples, desc=progress if isinstance(progress, str) else "dev")


@torch.inference_mode()
def predict_outputs(model: EncoderWithHeads, batches, *, progress: bool | str = False) -> np.ndarray:
    """Logits (N, C), or scores (N,) in the labels' units for regression, over ``batches`` in dataset order (an
    :class:`~ctxemb.training.data.EvalBatches` visiting its examples by length has them put back). ``progress``:
    a bar over the batches (:func:`eval_bar`; a string is its label)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    outs = []
    bar = _batches_bar(batches, progress)
    for batch in batches:
        batch = {k: v for k, v in move_to_device(batch, device).items() if k != "labels"}
        logits = model(**batch).logits.float().cpu()
        outs.append(model.regression_scores(logits) if model.problem == "regression" else logits)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    model.train(was_training)
    out = torch.cat(outs).numpy()
    order = getattr(batches, "order", None)
    return out if order is None else out[np.argsort(np.asarray(order), kind="stable")]


@torch.inference_mode()
def model_logits(model: EncoderWithHeads, batches, *, progress: bool | str = False) -> list[np.ndarray]:
    """Per feature, its logits without padding: (T_i, C) tokens, (S_i, C) spans or (T_i, 2) QA scores, in
    dataset order (see :func:`predict_outputs`, and its ``progress``)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[np.ndarray] = []
    bar = _batches_bar(batches, progress)
    for batch in batches:
        batch = move_to_device(batch, device)
        inputs = {k: v for k, v in batch.items()
                  if k not in ("labels", "word_labels", "span_labels", "start_positions", "end_positions")}
        logits = model(**inputs).logits.float().cpu()
        lengths = (batch["span_mask"] if "span_mask" in batch else batch["attention_mask"]).sum(1).tolist()
        out.extend(row[:n].numpy() for row, n in zip(logits, lengths))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    model.train(was_training)
    order = getattr(batches, "order", None)
    return out if order is None else restore_order(out, order)
