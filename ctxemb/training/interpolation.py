"""Weight-space interpolation between the encoder a run started from and the one it trained (WiSE-FT).

Fine-tuning a pretrained encoder on a small or narrow dataset can move it away from what it already did well (a
sentence embedder trained on 1B pairs, tuned further on a few thousand NLI rows, loses a little on STS-B). Robust
fine-tuning (WiSE-FT, Wortsman et al. 2022) takes the straight line between the two sets of weights:

    theta(alpha) = theta_start + alpha * (theta_trained - theta_start),   alpha in (0, 1]

and picks alpha on dev. Only the encoder is interpolated (``model.encoder`` where the model has one: a task model's
head is new, so its starting point is a random initialisation, not a model worth returning towards); alpha = 1 is
the trained model itself and always a candidate, so the choice can only match or beat it on the dev metric.

Used by :func:`ctxemb.training.recipe.run_training` when ``TrainConfig.interpolate`` lists the alphas.
"""

from __future__ import annotations

import logging
from typing import Callable, Mapping, Sequence

import torch
from torch import nn

# the check of the weights lives in ctxemb.training.config (TrainConfig runs it without torch); importable from here
from ctxemb.training.config import check_alphas

logger = logging.getLogger(__name__)


def interpolated_module(model: nn.Module) -> nn.Module:
    """The part of ``model`` that is interpolated: its encoder where it has one, else the whole model."""
    encoder = getattr(model, "encoder", None)
    return encoder if isinstance(encoder, nn.Module) else model


def snapshot(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of ``module``'s floating-point parameters and buffers (on their own device)."""
    return {k: v.detach().clone() for k, v in module.state_dict().items() if v.is_floating_point()}


@torch.no_grad()
def set_interpolation(module: nn.Module, start: Mapping[str, torch.Tensor], trained: Mapping[str, torch.Tensor],
                      alpha: float) -> None:
    """Set ``module``'s weights to ``start + alpha * (trained - start)`` in place (float tensors of both)."""
    state = module.state_dict()
    for name, s in start.items():
        state[name].copy_(trained[name] if alpha == 1 else torch.lerp(s, trained[name], alpha))


def choose_interpolation(model: nn.Module, start: Mapping[str, torch.Tensor], alphas: Sequence[float],
                         evaluate: Callable[[nn.Module], Mapping[str, float]], metric: str, *,
                         greater_is_better: bool, trained_metrics: Mapping[str, float]) -> dict:
    """Evaluate (in eval mode) the interpolations of ``model`` (trained) with its starting weights ``start`` at each
    alpha, leave ``model`` at the best one on ``metric`` (the trained weights win ties), and say what was done.

    Args:
        model: the trained model (its :func:`interpolated_module` is changed in place).
        start: :func:`snapshot` of that module before training.
        alphas: weights in (0, 1) (:func:`check_alphas`).
        evaluate: ``evaluate(model) -> metrics`` (the task's dev evaluator).
        metric: the metric to choose by; ``greater_is_better`` its direction.
        trained_metrics: the trained model's metrics (alpha = 1), already evaluated (evaluated here if they lack
            ``metric``, e.g. after a run with no evaluation).

    Returns:
        ``{"metric", "alpha" (the chosen one), "metrics" (the chosen model's), "candidates": [{"alpha", **metrics}]}``.

    Raises:
        KeyError: the evaluator's metrics lack ``metric``.
        ValueError: ``start`` does not name the same tensors as the model's interpolated module.
    """
    module = interpolated_module(model)
    trained = snapshot(module)
    if set(trained) != set(start):
        raise ValueError("the model's weights do not match the snapshot taken before training (different names)")
    was_training = model.training
    model.eval()  # evaluated as the loop evaluates: dropout off
    try:
        if metric not in trained_metrics:
            trained_metrics = dict(evaluate(model))
        candidates = [{"alpha": 1.0, **trained_metrics}]
        for alpha in check_alphas(alphas):
            set_interpolation(module, start, trained, alpha)
            metrics = dict(evaluate(model))
            logger.info("interpolation alpha %.2f: %s %.4f", alpha, metric, metrics[metric])
            candidates.append({"alpha": alpha, **metrics})
    finally:
        model.train(was_training)
    sign = 1 if greater_is_better else -1
    best = max(candidates, key=lambda c: (sign * c[metric], c["alpha"]))
    set_interpolation(module, start, trained, best["alpha"])
    metrics = {k: v for k, v in best.items() if k != "alpha"}
    return {"metric": metric, "alpha": best["alpha"], "metrics": metrics, "candidates": candidates}
