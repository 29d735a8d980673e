"""Sense-aware training objectives over the encoder: a context-gloss bi-encoder and supervised contrastive learning
on occurrences (the modules; the recipe that feeds them SemCor is :mod:`ctxemb.tasks.sense.training`).

Both read a target word's vector exactly as the :class:`~ctxemb.embedding.embedder.Embedder` makes it at query time: the
chosen hidden states (0 = embedding output, -1 = last layer; default the last four) pooled over layers (mean, sum or
concatenation), then over the word's subword tokens (mean, first or last). That pooling is linear in the token
states, so a batch carries it as a weight matrix over tokens (:func:`pool_rows`): one row per target word, mean
pooling giving each of the word's n subwords 1/n. A gloss vector is the mean of its words' vectors, as
:func:`ctxemb.wsd.glosses.embed_glosses` computes it (weights 1/(n_w * W) on the tokens of word w of W).

- :class:`ContextGlossBiEncoder` (BEM, Blevins & Zettlemoyer 2020): a target's contextual vector is scored against
  the gloss vectors of its candidate senses (dot product, or cosine / temperature), cross-entropy over the
  candidates; with several gold senses, the loss is -log of their summed probability. The gloss encoder is the
  context encoder (shared weights, the default) or a second encoder.
- :class:`SupConSenseEncoder` (Khosla et al. 2020): unit target vectors; for an anchor i with positives P(i)
  (occurrences of the same sense) and the set A(i) it is contrasted against (every other occurrence in the batch, or
  only those of the same lemma), ``loss_i = -1/|P(i)| sum_{p in P(i)} log(exp(z_i.z_p / t) / sum_{a in A(i)}
  exp(z_i.z_a / t))``, averaged over the anchors that have a positive. Other senses of the same lemma are the hard
  negatives; the batch sampler puts them together.

Shapes: B context sequences, T tokens, M target words, G gloss sequences, T_g gloss tokens, K candidate senses per
target (padded with -1), H hidden size (n * H for concatenated layers), n pooled layers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.core.validation import check_choice
from ctxemb.modeling.base import EncoderWithHeads, encoder_depth_modules
from ctxemb.modeling.encoder import Encoder
from ctxemb.models.head_options import LAYER_POOLINGS, NEGATIVES, SCORES, LayerPooling, Negatives, Score

logger = logging.getLogger(__name__)

__all__ = [
    "ContextGlossBiEncoder", "SenseTrainingOutput", "SupConSenseEncoder", "bem_loss", "pool_in_length_chunks",
    "pool_rows", "pooled_states", "supcon_loss",
]


@dataclass
class SenseTrainingOutput:
    """What the sense-training modules return (the training loop reads ``loss`` and ``metrics``).

    Attributes:
        loss: the mean loss over the targets that have one (scalar).
        metrics: floats for logging: ``accuracy`` (BEM: the gold sense scores highest among the candidates;
            SupCon: the nearest other occurrence of the same lemma has the same sense, over the occurrences with both
            a positive and a same-lemma negative in the batch), ``targets``.
        scores: BEM: (M, K) candidate scores (-inf at padding); SupCon: (M, M) similarities / temperature.
        vectors: (M, H) the target vectors (before normalisation).
    """

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    scores: torch.Tensor | None = None
    vectors: torch.Tensor | None = None


def _check_layers(encoder: Encoder, layers: Sequence[int]) -> tuple[int, ...]:
    if isinstance(layers, (str, int)) or not len(layers):
        raise ValueError(f"layers must be a non-empty sequence of hidden-state indices, got {layers!r}")
    resolved = encoder.resolve_layers(list(layers))  # raises naming the valid range
    if len(set(resolved)) != len(resolved):
        raise ValueError(f"layers {list(layers)} name the same hidden state twice")
    return tuple(int(i) for i in layers)


def pooled_states(encoder: Encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  layers: Sequence[int], layer_pooling: str = "mean") -> torch.Tensor:
    """The encoder's hidden states ``layers`` pooled over layers, per token: (B, T, H) (``concat``: (B, T, n * H)).

    ``layers`` are hidden-state indices: 0 is the embedding output, -1 the last layer (L + 1 states in all).
    """
    out = encoder(input_ids, attention_mask, hidden_state_indices=layers, output_hidden_states=True,
                  compute_pooler=False)
    by_index = dict(zip(out.hidden_state_indices, out.hidden_states))
    states = torch.stack([by_index[i] for i in encoder.resolve_layers(list(layers))], dim=2)  # (B, T, n, H)
    if layer_pooling == "mean":
        return states.mean(dim=2)
    if layer_pooling == "sum":
        return states.sum(dim=2)
    return states.flatten(2)  # concat


def pool_rows(states: torch.Tensor, rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted sums of token states: vector m = sum_t weights[m, t] * states[rows[m], t].

    Args:
        states: (B, T, H) pooled token states.
        rows: (M,) the sequence each vector is read from.
        weights: (M, T) weights over that sequence's tokens (zero on special tokens and padding).

    Returns:
        (M, H).
    """
    return torch.einsum("mt,mth->mh", weights.to(states.dtype), states[rows])


def pool_in_length_chunks(encoder: Encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                          rows: torch.Tensor, weights: torch.Tensor, layers: Sequence[int], layer_pooling: str,
                          chunk_tokens: int | None) -> torch.Tensor:
    """:func:`pooled_states` then :func:`pool_rows`, running the encoder on length-sorted chunks of the sequences,
    each cut to its own longest sequence and holding at most ``chunk_tokens`` padded tokens (None: one pass).

    A batch of many short texts of mixed lengths (the glosses of a BEM batch) otherwise pads every text to the
    longest one; the chunks also bound the activations kept for the backward pass. The result is the same up to
    float rounding (padding is masked; positions are unchanged).

    Args:
        encoder: the encoder.
        input_ids, attention_mask: (B, T).
        rows: (M,) the sequence of each vector; weights: (M, T) the pooling weights (zero beyond a sequence's end).
        layers, layer_pooling: see :func:`pooled_states`.
        chunk_tokens: padded tokens per encoder pass.

    Returns:
        (M, H).
    """
    if chunk_tokens is None:
        return pool_rows(pooled_states(encoder, input_ids, attention_mask, layers, layer_pooling), rows, weights)
    lengths = attention_mask.sum(1).tolist()
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    chunks: list[list[int]] = []
    for i in order:  # longest first: a chunk's first sequence sets its width
        if chunks and (len(chunks[-1]) + 1) * lengths[chunks[-1][0]] <= chunk_tokens:
            chunks[-1].append(i)
        else:
            chunks.append([i])
    rows_list = rows.tolist()
    by_row: dict[int, list[int]] = {}
    for m, r in enumerate(rows_list):
        by_row.setdefault(r, []).append(m)
    vectors, taken = [], []
    for chunk in chunks:
        width = max(1, int(lengths[chunk[0]]))
        targets = [m for r in chunk for m in by_row.get(r, [])]
        if not targets:
            continue
        local = {r: j for j, r in enumerate(chunk)}
        idx = torch.tensor(chunk, device=input_ids.device)
        states = pooled_states(encoder, input_ids[idx, :width], attention_mask[idx, :width], layers, layer_pooling)
        t_idx = torch.tensor(targets, device=input_ids.device)
        local_rows = torch.tensor([local[rows_list[m]] for m in targets], device=input_ids.device)
        vectors.append(pool_rows(states, local_rows, weights[t_idx, :width]))
        taken.extend(targets)
    inverse = torch.empty(len(taken), dtype=torch.long, device=input_ids.device)
    inverse[torch.tensor(taken, device=input_ids.device)] = torch.arange(len(taken), device=input_ids.device)
    return torch.cat(vectors)[inverse]


def bem_loss(scores: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over candidates with possibly several gold senses: mean over targets of
    ``logsumexp(scores) - logsumexp(scores[gold])``.

    Args:
        scores: (M, K) candidate scores, -inf at padding.
        gold: (M, K) bool, at least one True per row.
    """
    gold_scores = scores.masked_fill(~gold, float("-inf"))
    return (torch.logsumexp(scores, dim=1) - torch.logsumexp(gold_scores, dim=1)).mean()


def supcon_loss(z: torch.Tensor, sense_ids: torch.Tensor, lemma_ids: torch.Tensor, temperature: float,
                negatives: str = "batch") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Supervised contrastive loss over unit vectors (see the module docstring).

    Args:
        z: (M, H) unit vectors.
        sense_ids: (M,) equal ids = the same sense (positives).
        lemma_ids: (M,) equal ids = the same lemma.
        temperature: t > 0.
        negatives: ``"batch"`` (A(i) = every other row) or ``"lemma"`` (A(i) = other rows of the same lemma).

    Returns:
        (loss over the anchors with at least one positive (0 if none has), (M, M) logits with -inf outside A(i),
        (M,) bool: which rows were anchors).
    """
    m = z.shape[0]
    eye = torch.eye(m, dtype=torch.bool, device=z.device)
    logits = (z @ z.T).float() / temperature  # (M, M)
    allowed = ~eye
    if negatives == "lemma":
        allowed &= lemma_ids[:, None] == lemma_ids[None, :]
    positive = (sense_ids[:, None] == sense_ids[None, :]) & allowed
    logits = logits.masked_fill(~allowed, float("-inf"))
    n_pos = positive.sum(1)
    anchors = n_pos > 0
    if not bool(anchors.any()):
        return logits.new_zeros(()) + 0.0 * z.sum(), logits, anchors
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)  # -inf outside A(i)
    pos_log_prob = log_prob.masked_fill(~positive, 0.0).sum(1)
    loss = -(pos_log_prob[anchors] / n_pos[anchors]).mean()
    return loss, logits, anchors


def _same_lemma_nn_accuracy(sim: torch.Tensor, sense_ids: torch.Tensor, lemma_ids: torch.Tensor) -> tuple[float, int]:
    """Share of rows whose most similar other occurrence of the same lemma has the same sense, over the rows that
    have both another occurrence of their sense and one of another sense of their lemma (0.0 when no row has: the
    loop averages metrics, and a NaN would spoil the average; the recipe's batches always hold such rows)."""
    m = sim.shape[0]
    same_lemma = (lemma_ids[:, None] == lemma_ids[None, :]) & ~torch.eye(m, dtype=torch.bool, device=sim.device)
    same_sense = sense_ids[:, None] == sense_ids[None, :]
    has = (same_lemma & same_sense).any(1) & (same_lemma & ~same_sense).any(1)
    if not bool(has.any()):
        return 0.0, 0
    nearest = sim.masked_fill(~same_lemma, float("-inf")).argmax(1)
    right = (sense_ids[nearest] == sense_ids)[has]
    return float(right.float().mean()), int(has.sum())


class _SenseModule(EncoderWithHeads):
    """The encoder under its checkpoint prefix (``bert.``, ...), the Embedder's pooling, freezing by depth."""

    def __init__(self, encoder: Encoder, layers: Sequence[int], layer_pooling: str, chunk_tokens: int | None):
        super().__init__(encoder)
        check_choice(layer_pooling, "layer_pooling", LAYER_POOLINGS)
        if chunk_tokens is not None and (isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int)
                                         or chunk_tokens < 1):
            raise ValueError(f"chunk_tokens must be a positive int or None, got {chunk_tokens!r}")
        self.layers = _check_layers(encoder, layers)
        self.layer_pooling = layer_pooling
        self.chunk_tokens = chunk_tokens
        self.freeze_unused_pooler()  # no objective here reads the pooler; it is saved unchanged

    def target_vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, target_rows: torch.Tensor,
                       target_weights: torch.Tensor) -> torch.Tensor:
        """(M, H) target word vectors as the Embedder pools them (see :func:`pool_rows`)."""
        return pool_in_length_chunks(self.encoder, input_ids, attention_mask, target_rows, target_weights,
                                     self.layers, self.layer_pooling, self.chunk_tokens)

    def depth_modules(self) -> list[tuple[int, str, nn.Module]]:
        return self.encoder_depth_modules()


class ContextGlossBiEncoder(_SenseModule):
    """BEM: contextual target vectors scored against the gloss vectors of their candidate senses.

    Args:
        encoder: the context encoder (fine-tuned; also the gloss encoder unless ``gloss_encoder`` is given).
        gloss_encoder: a second encoder for the glosses (``"separate"`` weights), or None to share ``encoder``.
        layers: hidden-state indices pooled (0 = embedding output, -1 = last layer), as the Embedder's ``layers``.
        layer_pooling: ``"mean"``, ``"sum"`` or ``"concat"`` over those layers.
        score: ``"dot"`` (BEM's dot product) or ``"cosine"`` (divided by ``temperature``; the sense store compares
            by cosine).
        temperature: divides cosine scores (ignored for ``"dot"``).
        chunk_tokens: run the encoder on length-sorted chunks of at most this many padded tokens (contexts and
            glosses separately; see :func:`pool_in_length_chunks`); None: each side in one pass.

    Raises:
        ValueError: an unknown option, a layer index out of range, a non-positive temperature, or a gloss encoder
            of another hidden size.
    """

    def __init__(self, encoder: Encoder, *, gloss_encoder: Encoder | None = None,
                 layers: Sequence[int] = (-4, -3, -2, -1), layer_pooling: LayerPooling = "mean",
                 score: Score = "dot", temperature: float = 0.05, chunk_tokens: int | None = 2048):
        super().__init__(encoder, layers, layer_pooling, chunk_tokens)
        check_choice(score, "score", SCORES)
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        if gloss_encoder is not None:
            if gloss_encoder.config.hidden_size != encoder.config.hidden_size:
                raise ValueError(f"the gloss encoder's hidden size ({gloss_encoder.config.hidden_size}) differs from "
                                 f"the context encoder's ({encoder.config.hidden_size})")
            _check_layers(gloss_encoder, layers)
            if gloss_encoder.pooler is not None:
                gloss_encoder.pooler.requires_grad_(False)
        self.gloss_encoder = gloss_encoder
        self.score = score
        self.temperature = float(temperature)

    @property
    def glosses(self) -> Encoder:
        """The encoder that embeds glosses (the context encoder when weights are shared)."""
        return self.encoder if self.gloss_encoder is None else self.gloss_encoder

    def gloss_vectors(self, gloss_input_ids: torch.Tensor, gloss_attention_mask: torch.Tensor,
                      gloss_weights: torch.Tensor) -> torch.Tensor:
        """(G, H) gloss vectors: the mean of each gloss's word vectors."""
        rows = torch.arange(gloss_input_ids.shape[0], device=gloss_input_ids.device)
        return pool_in_length_chunks(self.glosses, gloss_input_ids, gloss_attention_mask, rows, gloss_weights,
                                     self.layers, self.layer_pooling, self.chunk_tokens)

    def depth_modules(self) -> list[tuple[int, str, nn.Module]]:
        out = self.encoder_depth_modules()
        if self.gloss_encoder is not None:
            out += encoder_depth_modules(self.gloss_encoder, "gloss_encoder")
        return out

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, target_rows: torch.Tensor,
                target_weights: torch.Tensor, gloss_input_ids: torch.Tensor, gloss_attention_mask: torch.Tensor,
                gloss_weights: torch.Tensor, candidates: torch.Tensor, gold: torch.Tensor) -> SenseTrainingOutput:
        """Scores and loss of one batch.

        Args:
            input_ids, attention_mask: (B, T) context sequences.
            target_rows: (M,) the sequence of each target; target_weights: (M, T) its pooling weights.
            gloss_input_ids, gloss_attention_mask: (G, T_g) the batch's distinct glosses; gloss_weights: (G, T_g).
            candidates: (M, K) gloss row of each candidate sense, -1 at padding.
            gold: (M, K) bool, True at the gold senses (at least one per row).

        Returns:
            :class:`SenseTrainingOutput` with (M, K) scores.

        Raises:
            ValueError: inconsistent shapes, or a target without a gold candidate.
        """
        m, k = candidates.shape
        if gold.shape != (m, k) or target_rows.shape != (m,) or target_weights.shape != (m, input_ids.shape[1]):
            raise ValueError(f"inconsistent batch: candidates {tuple(candidates.shape)}, gold {tuple(gold.shape)}, "
                             f"target_rows {tuple(target_rows.shape)}, target_weights {tuple(target_weights.shape)}, "
                             f"input_ids {tuple(input_ids.shape)}")
        valid = candidates >= 0
        if not bool((gold & valid).any(1).all()):
            raise ValueError("every target needs a gold sense among its candidates")
        ctx = self.target_vectors(input_ids, attention_mask, target_rows, target_weights)  # (M, H)
        glosses = self.gloss_vectors(gloss_input_ids, gloss_attention_mask, gloss_weights)  # (G, H)
        if self.score == "cosine":
            ctx, glosses = F.normalize(ctx.float(), dim=-1), F.normalize(glosses.float(), dim=-1)
        cand = glosses[candidates.clamp(min=0)]  # (M, K, H)
        scores = torch.einsum("mh,mkh->mk", ctx.float(), cand.float())
        if self.score == "cosine":
            scores = scores / self.temperature
        scores = scores.masked_fill(~valid, float("-inf"))
        loss = bem_loss(scores, gold & valid)
        with torch.no_grad():
            right = gold.gather(1, scores.argmax(1, keepdim=True)).float().mean()
        return SenseTrainingOutput(loss=loss, metrics={"accuracy": float(right), "targets": float(m)},
                                   scores=scores, vectors=ctx)


class SupConSenseEncoder(_SenseModule):
    """Supervised contrastive training of target vectors: same sense together, other senses of the lemma apart.

    Args:
        encoder: the encoder to fine-tune.
        layers, layer_pooling: the Embedder's pooling (see :class:`ContextGlossBiEncoder`).
        temperature: t in the loss (smaller = sharper).
        negatives: ``"batch"`` (contrast with every other occurrence in the batch; the sampler guarantees
            same-lemma hard negatives) or ``"lemma"`` (only with occurrences of the same lemma, the competition
            nearest-sense WSD actually has).
        chunk_tokens: see :class:`ContextGlossBiEncoder`.

    Raises:
        ValueError: an unknown option, a layer index out of range, a non-positive temperature.
    """

    def __init__(self, encoder: Encoder, *, layers: Sequence[int] = (-4, -3, -2, -1),
                 layer_pooling: LayerPooling = "mean", temperature: float = 0.1, negatives: Negatives = "batch",
                 chunk_tokens: int | None = 2048):
        super().__init__(encoder, layers, layer_pooling, chunk_tokens)
        check_choice(negatives, "negatives", NEGATIVES)
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.temperature = float(temperature)
        self.negatives = negatives

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, target_rows: torch.Tensor,
                target_weights: torch.Tensor, sense_ids: torch.Tensor, lemma_ids: torch.Tensor) -> SenseTrainingOutput:
        """Loss of one batch of M occurrences.

        Args:
            input_ids, attention_mask: (B, T) the distinct sentences of the batch.
            target_rows: (M,) the sentence of each occurrence; target_weights: (M, T) its pooling weights.
            sense_ids: (M,) sense of each occurrence (equal = positive pair).
            lemma_ids: (M,) lemma of each occurrence.

        Raises:
            ValueError: inconsistent shapes.
        """
        m = target_rows.shape[0]
        if sense_ids.shape != (m,) or lemma_ids.shape != (m,) or target_weights.shape != (m, input_ids.shape[1]):
            raise ValueError(f"inconsistent batch: target_rows {tuple(target_rows.shape)}, sense_ids "
                             f"{tuple(sense_ids.shape)}, lemma_ids {tuple(lemma_ids.shape)}, target_weights "
                             f"{tuple(target_weights.shape)}, input_ids {tuple(input_ids.shape)}")
        vectors = self.target_vectors(input_ids, attention_mask, target_rows, target_weights)  # (M, H)
        z = F.normalize(vectors.float(), dim=-1)
        loss, logits, anchors = supcon_loss(z, sense_ids, lemma_ids, self.temperature, self.negatives)
        with torch.no_grad():
            acc, _ = _same_lemma_nn_accuracy(z @ z.T, sense_ids, lemma_ids)
        return SenseTrainingOutput(loss=loss, metrics={"accuracy": acc, "anchors": float(anchors.sum()),
                                                       "targets": float(m)},
                                   scores=logits, vectors=vectors)
