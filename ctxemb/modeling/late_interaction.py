"""A late-interaction retriever for training (ColBERT): the encoder, a bias-free linear projection of every token
vector (H -> D), L2 normalisation, and MaxSim scores trained with in-batch and hard negatives.

``score(q, d) = sum_i max_j <q_i, d_j>`` over the query's token vectors (its [MASK] expansion tokens included) and
the document's (padding and punctuation excluded by ``doc_mask``). The loss is the cross-entropy of each query
against its positive, the other queries' positives and every hard negative of the batch, on ``scale * score``
(ColBERT trains on the raw scores: ``scale = 1``).

The conventions that turn texts into model inputs (:class:`LateInteractionConfig`, :func:`query_input_ids`,
:func:`document_pieces`) live here too, so that training and search build the same inputs.

With ``cache_batch_size`` set, training embeds queries and documents in mini-batches and back-propagates through
cached vector gradients (GradCache, :mod:`ctxemb.modeling.grad_cache`): the gradients of the plain loss with the
activation memory of one mini-batch, for a second forward pass.

Saved as the encoder's HF directory plus ``1_Dense/`` (``linear.weight``, (D, H)) and the files PyLate reads
(:mod:`ctxemb.modeling.pylate_format`): ``pylate.models.ColBERT(DIR)`` loads it with the same conventions, and
:class:`~ctxemb.search.late.LateInteractionEncoder` loads it for indexing and search.

Shapes: B queries, N = B * (1 + K) documents (positives, then K blocks of B hard negatives), Tq query tokens,
Td document tokens, H hidden size, D projection width.
"""

from __future__ import annotations

import os
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from ctxemb.core.validation import read_json_file
from ctxemb.modeling.base import EncoderWithHeads
from ctxemb.modeling.checkpoint import load_encoder_dir, save_pretrained
from ctxemb.modeling.contrastive_loss import false_negative_mask
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.grad_cache import cached_loss, mini_batches
from ctxemb.modeling.pylate_format import DENSE_DIR, LATE_CONFIG_KEY, write_pylate_modules
from ctxemb.models.head_options import LateInteractionConfig
# LateInteractionConfig lives in ctxemb.models.head_options (the fine-tuning configuration reads it without torch)


def marker_ids(tokenizer, config: LateInteractionConfig) -> tuple[int, int] | None:
    """The (query, document) marker token ids of ``config.markers``, or None.

    Raises:
        ValueError: a marker that is not in the tokenizer's vocabulary.
    """
    if config.markers is None:
        return None
    ids = [tokenizer.backend.token_to_id(m) for m in config.markers]
    for m, i in zip(config.markers, ids):
        if i is None:
            raise ValueError("markers: the token %r is not in the tokenizer's vocabulary" % m)
    return ids[0], ids[1]


def punctuation_ids(tokenizer) -> set[int]:
    """Ids of the single-character punctuation tokens (dropped from documents)."""
    return {i for c in string.punctuation if (i := tokenizer.backend.token_to_id(c)) is not None}


def query_input_ids(tokenizer, ids: Sequence[int], config: LateInteractionConfig,
                    markers: tuple[int, int] | None) -> list[int]:
    """A query's input ids before padding: [CLS], the query marker, its tokens, [SEP], at most ``query_length``."""
    prefix = [tokenizer.cls_token_id] + ([markers[0]] if markers else [])
    return (prefix + list(ids))[: config.query_length - 1] + [tokenizer.sep_token_id]


def pad_queries(tokenizer, rows: Sequence[Sequence[int]], config: LateInteractionConfig) -> tuple[torch.Tensor,
                                                                                                   torch.Tensor]:
    """(B, T) ids and attention mask: with augmentation, [MASK] up to ``query_length`` (attention mask 0, vectors
    kept); without, [PAD] to the longest."""
    T = config.query_length if config.query_augmentation else max(len(r) for r in rows)
    fill = tokenizer.mask_token_id if config.query_augmentation else tokenizer.pad_token_id
    input_ids = torch.full((len(rows), T), fill, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for r, ids in enumerate(rows):
        input_ids[r, :len(ids)] = torch.tensor(ids)
        mask[r, :len(ids)] = 1
    return input_ids, mask


def document_pieces(tokenizer, ids: Sequence[int], config: LateInteractionConfig,
                    markers: tuple[int, int] | None) -> list[tuple[list[int], int, int]]:
    """The model inputs of one document: (input ids, first kept position, last kept + 1) per input. One input cut
    at ``document_length`` ("truncate", or a short document); overlapping windows whose kept ranges tile the
    document ("window")."""
    from ctxemb.models.tokenization import plan_windows

    ids = list(ids)
    prefix = [tokenizer.cls_token_id] + ([markers[1]] if markers else [])
    room = config.document_length - len(prefix) - 1
    if config.long_documents == "truncate" or len(ids) <= room:
        seq = prefix + ids[:room] + [tokenizer.sep_token_id]
        return [(seq, 0, len(seq))]
    pieces = []
    windows = plan_windows(len(ids), room)
    for n, (s, e, keep_start, keep_stop) in enumerate(windows):
        seq = prefix + ids[s:e] + [tokenizer.sep_token_id]
        lo = 0 if n == 0 else len(prefix) + keep_start - s
        hi = len(seq) if n == len(windows) - 1 else len(prefix) + keep_stop - s
        pieces.append((seq, lo, hi))
    return pieces




@dataclass
class LateInteractionOutput:
    """The loss (scalar) and, for logging, ``accuracy``: the share of queries whose positive scores highest."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def maxsim_scores(queries: torch.Tensor, documents: torch.Tensor, doc_mask: torch.Tensor) -> torch.Tensor:
    """(B, N) MaxSim of (B, Tq, D) query vectors against (N, Td, D) document vectors; ``doc_mask`` (N, Td) is True
    where a document token counts."""
    sims = torch.einsum("bid,njd->bnij", queries, documents)  # (B, N, Tq, Td)
    sims = sims.masked_fill(~doc_mask[None, :, None, :], float("-inf"))
    return sims.amax(dim=-1).sum(dim=-1)


class EncoderForLateInteraction(EncoderWithHeads):
    """The encoder and its token projection (see the module docstring).

    Args:
        encoder: a pretrained encoder; the model owns it from now on.
        dim: D, the projection's width.
        scale: multiplies the scores in the loss (1 = ColBERT).
        projection: an initial (D, H) weight (e.g. a trained one); default random (PyTorch's Linear init).
        cache_batch_size: GradCache mini-batch size in texts (None: the plain loss); see the module docstring.

    Raises:
        ValueError: a bad ``dim``, ``scale``, ``projection`` shape or ``cache_batch_size``.
    """

    def __init__(self, encoder: Encoder, *, dim: int = 128, scale: float = 1.0, projection: torch.Tensor | None = None,
                 cache_batch_size: int | None = None):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale!r}")
        if cache_batch_size is not None and (isinstance(cache_batch_size, bool) or not isinstance(cache_batch_size, int)
                                             or cache_batch_size < 1):
            raise ValueError(f"cache_batch_size must be a positive int (texts per GradCache mini-batch) or None; got "
                             f"{cache_batch_size!r}")
        super().__init__(encoder)
        self.linear = nn.Linear(encoder.config.hidden_size, dim, bias=False)
        if projection is not None:
            if tuple(projection.shape) != (dim, encoder.config.hidden_size):
                raise ValueError(f"projection must be ({dim}, {encoder.config.hidden_size}), got "
                                 f"{tuple(projection.shape)}")
            with torch.no_grad():
                self.linear.weight.copy_(projection)
        self.scale = float(scale)
        self.cache_batch_size = cache_batch_size
        self.conventions: dict = {}  # a LateInteractionConfig as a dict, saved with the model
        encoder.pooler.requires_grad_(False) if getattr(encoder, "pooler", None) is not None else None
        self.train(encoder.training)

    def vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T, D) unit token vectors of every position (masked positions included: the caller decides)."""
        z = self.encoder(input_ids, attention_mask, None, output_hidden_states=False,
                         compute_pooler=False).last_hidden_state
        return F.normalize(self.linear(z).float(), dim=-1)

    def forward(self, query_input_ids: torch.Tensor, query_attention_mask: torch.Tensor,
                doc_input_ids: torch.Tensor, doc_attention_mask: torch.Tensor, doc_mask: torch.Tensor,
                query_keys: torch.Tensor | None = None, doc_keys: torch.Tensor | None = None
                ) -> LateInteractionOutput:
        """The loss of one batch: queries (B, Tq) (their [MASK] expansion positions carry attention mask 0 and are
        scored), documents (N, Td) with ``doc_mask`` (N, Td) marking the tokens that count; optional text keys (B,),
        (N,) that leave false negatives out (:func:`~ctxemb.modeling.contrastive_loss.false_negative_mask`).
        With ``cache_batch_size`` set, in training mode with gradients enabled, the GradCache path."""
        B, N = query_input_ids.shape[0], doc_input_ids.shape[0]
        if N % B or N < B:
            raise ValueError(f"doc_input_ids must hold B={B} positives and K blocks of B hard negatives; got {N} rows")

        def loss_of(q: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.loss(q, d, doc_mask.bool(), query_keys, doc_keys)

        if self.cache_batch_size is not None and self.training and torch.is_grad_enabled():
            m = self.cache_batch_size
            loss, scores = cached_loss(self.vectors, [mini_batches(m, query_input_ids, query_attention_mask),
                                                      mini_batches(m, doc_input_ids, doc_attention_mask)], loss_of)
        else:
            loss, scores = loss_of(self.vectors(query_input_ids, query_attention_mask),
                                   self.vectors(doc_input_ids, doc_attention_mask))
        target = torch.arange(B, device=scores.device)
        accuracy = float((scores.argmax(-1) == target).float().mean())
        return LateInteractionOutput(loss=loss, metrics={"accuracy": accuracy})

    def loss(self, queries: torch.Tensor, documents: torch.Tensor, doc_mask: torch.Tensor,
             query_keys: torch.Tensor | None = None, doc_keys: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """(the loss, the (B, N) scores detached) of (B, Tq, D) query vectors against (N, Td, D) document vectors:
        the cross-entropy of each query against its positive (document i) on ``scale`` times the MaxSim scores, false
        negatives (equal text keys) left out."""
        scores = maxsim_scores(queries, documents, doc_mask)
        if query_keys is not None and doc_keys is not None:
            scores = scores.masked_fill(false_negative_mask(query_keys, doc_keys), float("-inf"))
        target = torch.arange(queries.shape[0], device=scores.device)
        return F.cross_entropy(self.scale * scores, target), scores.detach()

    def depth_modules(self) -> list[tuple[int, str, nn.Module]]:
        return self.encoder_depth_modules() + [(self.encoder.num_layers + 1, "linear", self.linear)]

    def save_pretrained(self, out_dir: str | os.PathLike, *, tokenizer=None) -> Path:
        """The encoder (a bare HF directory), :attr:`conventions` (a :class:`LateInteractionConfig` as a dict) under
        ``ctxemb_late_interaction`` in config.json, the projection under ``1_Dense/`` and the files PyLate reads
        (:mod:`ctxemb.modeling.pylate_format`). The tokenizer's files are the caller's to copy; ``tokenizer``, if
        given, restricts PyLate's punctuation skiplist to its vocabulary (default: every punctuation character)."""
        out_dir = Path(out_dir)
        extra = {LATE_CONFIG_KEY: {"dim": self.linear.out_features, "scale": self.scale,
                                   "conventions": self.conventions}}
        save_pretrained(self.encoder, out_dir, config_extra=extra)
        write_pylate_modules(out_dir, self.linear.weight, LateInteractionConfig.from_dict(self.conventions), tokenizer)
        return out_dir

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, dim: int = 128, scale: float | None = None,
                        cache_batch_size: int | None = None) -> "EncoderForLateInteraction":
        """Load a saved late-interaction model, or start one from a plain encoder directory (a fresh projection of
        width ``dim``); ``cache_batch_size`` as in the constructor (a training setting, not saved)."""
        model_dir = Path(model_dir)
        encoder, _ = load_encoder_dir(model_dir)
        projection = load_projection(model_dir)
        settings = read_json_file(model_dir / "config.json", "config file").get(LATE_CONFIG_KEY) or {}
        if projection is not None:
            dim = projection.shape[0]
        model = cls(encoder, dim=dim, scale=scale if scale is not None else settings.get("scale", 1.0),
                    projection=projection, cache_batch_size=cache_batch_size)
        model.conventions = dict(settings.get("conventions") or {})
        return model


def load_projection(model_dir: str | os.PathLike) -> torch.Tensor | None:
    """The (D, H) projection saved under ``1_Dense/`` of ``model_dir``, or None when there is none."""
    path = Path(model_dir) / DENSE_DIR / "model.safetensors"
    if not path.is_file():
        return None
    tensors = load_file(str(path))
    if "linear.weight" not in tensors:
        from ctxemb.core.validation import CorruptFileError

        raise CorruptFileError(f"{path}: expected a tensor 'linear.weight', found {sorted(tensors)}", path)
    return tensors["linear.weight"].float()
