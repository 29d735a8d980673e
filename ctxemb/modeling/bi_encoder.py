"""A bi-encoder trained contrastively: :class:`EncoderForContrastive` (sentence vectors = the mean of the last layer
over the tokens, normalised, as all-MiniLM-L6-v2 computes them), with the losses of
:mod:`ctxemb.modeling.contrastive_loss` and an optional cached-gradient mode (GradCache).

GradCache (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup";
sentence-transformers' ``CachedMultipleNegativesRankingLoss``). The loss of a batch couples all its vectors, so a
plain backward keeps the activations of the whole batch. With ``cache_batch_size=m`` the forward instead

1. embeds the batch in mini-batches of m texts without gradients (recording each mini-batch's random state, so
   that dropout is the same when it is run again);
2. computes the loss on those vectors (made leaves) and its gradient with respect to every vector;
3. returns the loss; when the training loop calls ``backward`` on it, a hook re-runs each mini-batch with
   gradients under its recorded random state and back-propagates the cached vector gradients (times the gradient
   the loop passes down, e.g. 1 / gradient-accumulation steps) into the encoder.

The parameter gradients are those of the plain loss (up to float rounding); memory holds one mini-batch's
activations at a time, so a batch of 512 fits a small machine. Single process only: under torchrun, use the plain
loss (DDP's gradient hooks expect one backward per forward).

Shapes: B anchors, N = B * (1 + K) candidates (positives, then K blocks of B hard negatives), T tokens,
H hidden size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.core.validation import read_json_file
from ctxemb.modeling.base import EncoderWithHeads
from ctxemb.modeling.checkpoint import load_encoder_dir, save_pretrained
from ctxemb.modeling.contrastive_loss import contrastive_loss, false_negative_mask
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.sequence_classification import mean_pool
from ctxemb.models.head_options import check_matryoshka, check_scale

# config.json key recording how the bi-encoder was trained (Matryoshka dimensions included: truncation is trained)
CONTRASTIVE_CONFIG_KEY = "ctxemb_contrastive"


@dataclass
class ContrastiveOutput:
    """What :class:`EncoderForContrastive` returns: the loss (scalar), and ``accuracy``, the fraction of anchors
    whose own positive scores highest among the candidates (full vectors), for logging."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


class EncoderForContrastive(EncoderWithHeads):
    """A bi-encoder for (anchor, positive[, negatives]) rows: each text encoded alone, mean-pooled over its tokens
    (padding excluded), compared by cosine. It has no head: the encoder is the model, saved as a bare encoder that
    ``Embedder`` and sentence-transformers load (with the s-t modules the task writes beside it).

    Args:
        encoder: a pretrained encoder; the model owns it from now on.
        scale: the inverse temperature of the loss (20 = temperature 0.05).
        symmetric: add the positive -> anchor direction.
        matryoshka_dims: nested dimensions to train (e.g. (384, 256, 128, 64, 32)); None: the full vectors only.
        matryoshka_weights: one weight per dimension (default 1 each).
        cache_batch_size: GradCache mini-batch size in texts (None: the plain loss); see the module docstring.

    Raises:
        ValueError: a bad ``scale``, Matryoshka setting or ``cache_batch_size``.
    """

    def __init__(self, encoder: Encoder, *, scale: float = 20.0, symmetric: bool = False,
                 matryoshka_dims: Sequence[int] | None = None, matryoshka_weights: Sequence[float] | None = None,
                 cache_batch_size: int | None = None):
        scale = check_scale(scale)
        checked = check_matryoshka(matryoshka_dims, matryoshka_weights, encoder.config.hidden_size)
        if cache_batch_size is not None and (isinstance(cache_batch_size, bool) or not isinstance(cache_batch_size, int)
                                             or cache_batch_size < 1):
            raise ValueError(f"cache_batch_size must be a positive int (texts per GradCache mini-batch) or None; got "
                             f"{cache_batch_size!r}")
        super().__init__(encoder)
        self.scale = scale
        self.symmetric = bool(symmetric)
        self.matryoshka_dims, self.matryoshka_weights = checked if checked else (None, None)
        self.cache_batch_size = cache_batch_size
        encoder.pooler.requires_grad_(False)  # mean pooling reads no pooler
        self.train(encoder.training)

    # ---- vectors ----------------------------------------------------------------------------------------------
    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, H) mean of the last layer over each text's tokens (not normalised: the loss and :meth:`encode`
        normalise)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        z = self.encoder(input_ids, attention_mask, None, output_hidden_states=False,
                         compute_pooler=False).last_hidden_state  # (B, T, H)
        return mean_pool(z, attention_mask)

    @torch.no_grad()
    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, H) unit-length sentence vectors, in float32, without gradients."""
        return F.normalize(self.embed(input_ids, attention_mask).float(), dim=-1)

    def loss(self, anchors: torch.Tensor, candidates: torch.Tensor, anchor_keys: torch.Tensor | None = None,
             candidate_keys: torch.Tensor | None = None) -> torch.Tensor:
        """The model's loss on vectors (its scale, symmetry and Matryoshka dimensions)."""
        return contrastive_loss(anchors, candidates, scale=self.scale, symmetric=self.symmetric,
                                matryoshka_dims=self.matryoshka_dims, matryoshka_weights=self.matryoshka_weights,
                                anchor_keys=anchor_keys, candidate_keys=candidate_keys)

    # ---- training ---------------------------------------------------------------------------------------------
    def forward(self, anchor_input_ids: torch.Tensor, anchor_attention_mask: torch.Tensor,
                candidate_input_ids: torch.Tensor, candidate_attention_mask: torch.Tensor,
                anchor_keys: torch.Tensor | None = None, candidate_keys: torch.Tensor | None = None
                ) -> ContrastiveOutput:
        """The loss of one batch: anchors (B, T_a), candidates (N, T_c) = positives then hard-negative blocks,
        optional text keys (B,), (N,) that leave false negatives out (see :mod:`ctxemb.modeling.contrastive_loss`).
        With ``cache_batch_size`` set, in training mode with gradients enabled, the GradCache path."""
        B, N = anchor_input_ids.shape[0], candidate_input_ids.shape[0]
        if N % B or N < B:
            raise ValueError(f"candidate_input_ids must hold B={B} positives and K blocks of B hard negatives; got "
                             f"{N} rows")
        if self.cache_batch_size is not None and self.training and torch.is_grad_enabled():
            return self._cached_forward(anchor_input_ids, anchor_attention_mask, candidate_input_ids,
                                        candidate_attention_mask, anchor_keys, candidate_keys)
        a = self.embed(anchor_input_ids, anchor_attention_mask)
        c = self.embed(candidate_input_ids, candidate_attention_mask)
        loss = self.loss(a, c, anchor_keys, candidate_keys)
        return ContrastiveOutput(loss=loss, metrics={"accuracy": _top1(a, c, anchor_keys, candidate_keys)})

    def _cached_forward(self, a_ids, a_mask, c_ids, c_mask, a_keys, c_keys) -> ContrastiveOutput:
        m = self.cache_batch_size
        chunks = [(ids[i:i + m], mask[i:i + m]) for ids, mask in ((a_ids, a_mask), (c_ids, c_mask))
                  for i in range(0, ids.shape[0], m)]
        device = a_ids.device
        autocast = (torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type))
        states, reps = [], []
        with torch.no_grad():
            for ids, mask in chunks:
                states.append(_rng_state(device))
                reps.append(self.embed(ids, mask).float())
        reps_all = torch.cat(reps).requires_grad_()
        a, c = reps_all[:a_ids.shape[0]], reps_all[a_ids.shape[0]:]
        with torch.enable_grad():
            loss = self.loss(a, c, a_keys, c_keys)
            (grad,) = torch.autograd.grad(loss, reps_all)  # (B + N, H): d loss / d vectors, cached
        accuracy = _top1(a.detach(), c.detach(), a_keys, c_keys)
        out = loss.detach().requires_grad_()

        def replay(upstream: torch.Tensor) -> None:
            # Called by autograd when the loop back-propagates into ``out``: re-run each mini-batch with gradients
            # (same random state, same precision) and push the cached vector gradients into the parameters.
            offset = 0
            for (ids, mask), state in zip(chunks, states):
                with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                    _set_rng_state(state, device)
                    with torch.enable_grad(), torch.autocast(device.type, dtype=autocast[1], enabled=autocast[0]):
                        r = self.embed(ids, mask).float()
                g = grad[offset:offset + r.shape[0]] * upstream
                torch.autograd.backward(r, grad_tensors=g)
                offset += r.shape[0]

        out.register_hook(replay)
        return ContrastiveOutput(loss=out, metrics={"accuracy": accuracy})

    # ---- fine-tuning regimes and checkpoints ------------------------------------------------------------------
    def depth_modules(self) -> list[tuple[int, str, nn.Module]]:
        return self.encoder_depth_modules()

    def training_settings(self) -> dict:
        """What is recorded under ``ctxemb_contrastive`` in config.json."""
        return {"pooling": "mean", "normalize": True, "similarity": "cosine", "scale": self.scale,
                "symmetric": self.symmetric,
                "matryoshka_dims": list(self.matryoshka_dims) if self.matryoshka_dims else None,
                "matryoshka_weights": list(self.matryoshka_weights) if self.matryoshka_weights else None}

    def save_pretrained(self, out_dir: str | os.PathLike) -> Path:
        """A bare encoder (``AutoModel``, ``Embedder`` and sentence-transformers load it) with the training settings
        (Matryoshka dimensions included) under ``ctxemb_contrastive`` in config.json."""
        return save_pretrained(self.encoder, out_dir, config_extra={CONTRASTIVE_CONFIG_KEY: self.training_settings()})

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, strict: bool = True, **settings
                        ) -> "EncoderForContrastive":
        """Load an encoder directory as a bi-encoder; ``settings`` (scale, symmetric, matryoshka_dims,
        matryoshka_weights, cache_batch_size) default to what a saved bi-encoder recorded."""
        model_dir = Path(model_dir)
        encoder, _ = load_encoder_dir(model_dir, strict=strict)
        saved = read_json_file(model_dir / "config.json", "config file").get(CONTRASTIVE_CONFIG_KEY) or {}
        for key in ("scale", "symmetric", "matryoshka_dims", "matryoshka_weights"):
            if key not in settings and saved.get(key) is not None:
                settings[key] = saved[key]
        return cls(encoder, **settings)


def _top1(a: torch.Tensor, c: torch.Tensor, a_keys: torch.Tensor | None, c_keys: torch.Tensor | None) -> float:
    """The fraction of anchors whose positive scores highest (false negatives left out, as in the loss)."""
    with torch.no_grad():
        scores = F.normalize(a.float(), dim=-1) @ F.normalize(c.float(), dim=-1).T
        if a_keys is not None:
            scores = scores.masked_fill(false_negative_mask(a_keys, c_keys), float("-inf"))
        return float((scores.argmax(-1) == torch.arange(a.shape[0], device=a.device)).float().mean())


def _rng_state(device: torch.device):
    return (torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


def _set_rng_state(state, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if device.type == "cuda":
        torch.cuda.set_rng_state(state[1], device)
