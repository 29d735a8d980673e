"""GradCache (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup"): a loss
that couples every vector of a batch, computed with the memory of one mini-batch.

A contrastive loss over in-batch negatives needs all the batch's vectors at once, so a plain backward keeps the
activations of the whole batch. :func:`cached_loss` instead

1. embeds each group of inputs (e.g. queries, then documents) in mini-batches without gradients, recording the
   random state before each mini-batch (so that dropout draws the same masks when it is run again);
2. computes the loss on those vectors (made leaves) and its gradient with respect to every vector;
3. returns the loss; when the training loop calls ``backward`` on it, a hook re-runs each mini-batch with gradients
   under its recorded random state and precision, and back-propagates the cached vector gradients (times the
   gradient the loop passes down, e.g. 1 / gradient-accumulation steps) into the parameters.

The parameter gradients are those of the plain loss over the same mini-batches (up to float rounding); the cost is
a second forward pass of every mini-batch. Single process only: DDP's gradient hooks expect one backward per
forward, so a caller refuses it under torchrun.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

__all__ = ["cached_loss", "mini_batches"]


def mini_batches(size: int, *tensors: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
    """The rows of ``tensors`` (equal first dimensions) cut into consecutive mini-batches of ``size`` rows."""
    n = tensors[0].shape[0]
    return [tuple(t[i:i + size] for t in tensors) for i in range(0, n, size)]


def cached_loss(embed: Callable[..., torch.Tensor], groups: Sequence[Sequence[tuple[torch.Tensor, ...]]],
                loss_fn: Callable[..., tuple[torch.Tensor, Any]]) -> tuple[torch.Tensor, Any]:
    """The GradCache loss (see the module docstring).

    Args:
        embed: one mini-batch's inputs -> its (n, ...) vectors, differentiable in the parameters.
        groups: per group of texts, its mini-batches' inputs (tuples passed to ``embed``); the vectors of one group
            are concatenated in order, so every mini-batch of a group must give the same trailing shape.
        loss_fn: one (rows, ...) float32 tensor per group -> (scalar loss, anything for the caller, e.g. scores).

    Returns:
        (the loss, detached from the mini-batches' graphs, whose backward runs the replay; ``loss_fn``'s second
        value).
    """
    device = groups[0][0][0].device
    autocast = (torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type))
    states: list[list] = []
    leaves = []
    with torch.no_grad():
        for group in groups:
            states.append([])
            vectors = []
            for inputs in group:
                states[-1].append(_rng_state(device))
                vectors.append(embed(*inputs).float())
            leaves.append(torch.cat(vectors).requires_grad_())
    with torch.enable_grad():
        loss, extra = loss_fn(*leaves)
        grads = torch.autograd.grad(loss, leaves)  # d loss / d vectors, one tensor per group: the cache
    out = loss.detach().requires_grad_()

    def replay(upstream: torch.Tensor) -> None:
        # Called by autograd when the loop back-propagates into ``out``: re-run each mini-batch with gradients
        # (same random state, same precision) and push its slice of the cached gradient into the parameters.
        for group, group_states, grad in zip(groups, states, grads):
            offset = 0
            for inputs, state in zip(group, group_states):
                with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                    _set_rng_state(state, device)
                    with torch.enable_grad(), torch.autocast(device.type, dtype=autocast[1], enabled=autocast[0]):
                        vectors = embed(*inputs).float()
                torch.autograd.backward(vectors, grad_tensors=grad[offset:offset + vectors.shape[0]] * upstream)
                offset += vectors.shape[0]

    out.register_hook(replay)
    return out, extra


def _rng_state(device: torch.device):
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_rng_state(state, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if device.type == "cuda":
        torch.cuda.set_rng_state(state[1], device)
