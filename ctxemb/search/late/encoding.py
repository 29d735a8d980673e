"""Queries and documents as bags of contextual token vectors, with ColBERT's conventions (late interaction).

A :class:`LateInteractionEncoder` wraps an :class:`~ctxemb.embedding.embedder.Embedder` (any precision, any layer choice)
and adds what ColBERT (Khattab & Zaharia 2020; Santhanam et al. 2022) does around the encoder:

- **markers**: a query marker token after ``[CLS]`` of a query and a document marker after ``[CLS]`` of a document
  (``[unused0]`` and ``[unused1]`` in BERT vocabularies), so one encoder can treat the two sides differently. Off
  for a zero-shot encoder that never saw them (``markers=None``).
- **query augmentation**: queries are padded to ``query_length`` tokens with ``[MASK]``; the masks attend to the
  query but nothing attends to them, and their output vectors are kept: they act as soft expansion terms.
- **documents** are cut at ``document_length`` tokens (ColBERT's ``doc_maxlen``), or, with
  ``long_documents="window"``, encoded whole in overlapping windows so that every token sees its context (late
  chunking); tokens that are punctuation are dropped from documents only.
- an optional **projection** ``Linear(H, dim, bias=False)`` (ColBERT's 128 dimensions), then every vector is
  L2-normalised, so MaxSim sums cosines.

Shape legend: B texts in a batch, T tokens, H the encoder's width, D the output dimension.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import torch

from ctxemb.core.validation import check_int, check_string_batch
from ctxemb.runtime.engine import make_batches
from ctxemb.modeling.late_interaction import (LATE_CONFIG_KEY, LateInteractionConfig, document_pieces,
                                              load_projection, marker_ids, pad_queries, punctuation_ids,
                                              query_input_ids)


class LateInteractionEncoder:
    """Token vectors of queries and documents (see the module docstring).

    Args:
        embedder: runs the encoder (its precision and device are used).
        config: the conventions.
        projection: a bias-free ``torch.nn.Linear(H, D)``, or a (D, H) array, or None (D = H).

    Raises:
        ValueError: a marker token that is not in the vocabulary, or a projection whose input width is not H.
    """

    def __init__(self, embedder, config: LateInteractionConfig | None = None, projection=None):
        self.embedder = embedder
        self.config = config or LateInteractionConfig()
        tok = embedder.tokenizer
        self._markers = marker_ids(tok, self.config)
        hidden = embedder.hidden_size  # the layers are averaged: one H-wide vector per token
        if projection is not None and not isinstance(projection, torch.nn.Module):
            weight = torch.as_tensor(np.asarray(projection, dtype=np.float32))
            layer = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
            with torch.no_grad():
                layer.weight.copy_(weight)
            projection = layer
        if projection is not None:
            if projection.bias is not None:
                raise ValueError("projection must have no bias (ColBERT's linear layer is bias-free)")
            if projection.in_features != hidden:
                raise ValueError("projection takes %d inputs but the encoder gives %d" % (projection.in_features, hidden))
        self.projection = projection
        self._layers = embedder.encoder.resolve_layers(list(self.config.layers))
        self._skip = punctuation_ids(tok)

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, **embedder_args) -> "LateInteractionEncoder":
        """A trained late-interaction model (``ctxemb finetune late-interaction``): its encoder through an
        :class:`~ctxemb.embedding.embedder.Embedder` (``embedder_args``: precision, device, ...; the last layer), its
        projection and the conventions it was trained with."""
        from ctxemb.core.validation import read_json_file
        from ctxemb.embedding.embedder import Embedder
        from ctxemb.models.hub import resolve_model_dir

        directory = resolve_model_dir(model_dir)
        settings = read_json_file(directory / "config.json", "config file").get(LATE_CONFIG_KEY)
        if not settings:
            raise ValueError("%s is not a late-interaction model (config.json has no %r); for a plain encoder, "
                             "build LateInteractionEncoder(Embedder.from_pretrained(...)) instead"
                             % (directory, LATE_CONFIG_KEY))
        config = LateInteractionConfig.from_dict(settings.get("conventions") or {})
        embedder = Embedder.from_pretrained(directory, layers=list(config.layers), **embedder_args)
        return cls(embedder, config, projection=load_projection(directory))

    @property
    def dim(self) -> int:
        """D: the width of the output vectors."""
        return self.projection.out_features if self.projection is not None else self.embedder.hidden_size

    # ------------------------------------------------------------------------------------------------ inputs
    def query_inputs(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T) input ids and attention mask of queries: [CLS], the marker, tokens, [SEP], then [MASK] padding
        (not attended to) up to ``query_length``."""
        tok = self.embedder.tokenizer
        rows = [query_input_ids(tok, item.ids, self.config, self._markers) for item in tok.tokenize(texts)]
        return pad_queries(tok, rows, self.config)

    # ------------------------------------------------------------------------------------------------ running
    def _run(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T, D) L2-normalised float32 vectors."""
        states = self.embedder.backend.hidden_states(input_ids, mask, self._layers)  # (B, T, n, H)
        x = states.float().mean(dim=2)
        if self.projection is not None:
            with torch.inference_mode():
                x = self.projection(x.to(self.projection.weight.device))
        return torch.nn.functional.normalize(x, dim=-1)

    def encode_queries(self, texts: Sequence[str] | str, *, batch_size: int = 64) -> np.ndarray | list:
        """Query token vectors: (Q, query_length, D) float32 with augmentation (a (query_length, D) array for
        one str); without it, a list of (T_q, D) arrays."""
        single = isinstance(texts, str)
        texts = check_string_batch([texts] if single else texts, "texts", allow_empty_batch=True)
        check_int(batch_size, "batch_size", low=1)
        out: list = []
        for lo in range(0, len(texts), batch_size):
            ids, mask = self.query_inputs(texts[lo:lo + batch_size])
            x = self._run(ids, mask).cpu().numpy()
            if self.config.query_augmentation:
                out.append(x)
            else:
                out.extend(x[r, :int(mask[r].sum())] for r in range(len(x)))
        if self.config.query_augmentation:
            arr = np.concatenate(out) if out else np.zeros((0, self.config.query_length, self.dim), np.float32)
            return arr[0] if single else arr
        return out[0] if single else out

    def encode_documents(self, texts: Sequence[str], *, batch_size: int = 32, max_tokens_per_batch: int = 8192,
                         show_progress_bar: bool = True) -> list[np.ndarray]:
        """Document token vectors: one (T_i, D) float32 array per text, in the caller's order (punctuation
        dropped if configured; a document of only punctuation keeps its special tokens)."""
        from tqdm.auto import tqdm

        texts = check_string_batch(texts, "texts", allow_empty_batch=True)
        if not texts:
            return []
        pieces, owner = [], []
        for i, item in enumerate(self.embedder.tokenizer.tokenize(texts)):
            for p in document_pieces(self.embedder.tokenizer, item.ids, self.config, self._markers):
                pieces.append(p)
                owner.append(i)
        parts: list[list] = [[] for _ in texts]
        skip = self._skip if self.config.skip_punctuation else set()
        bar = tqdm(total=len(pieces), disable=not show_progress_bar or len(pieces) < 64, desc="documents",
                   unit="window")
        pad = self.embedder.tokenizer.pad_token_id
        for batch in make_batches([len(p[0]) for p in pieces], batch_size, max_tokens_per_batch):
            T = max(len(pieces[j][0]) for j in batch)
            ids = torch.full((len(batch), T), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), T), dtype=torch.long)
            for r, j in enumerate(batch):
                seq = pieces[j][0]
                ids[r, :len(seq)] = torch.tensor(seq)
                mask[r, :len(seq)] = 1
            x = self._run(ids, mask).cpu().numpy()
            for r, j in enumerate(batch):
                seq, lo, hi = pieces[j]
                keep = [t for t in range(lo, hi) if seq[t] not in skip]
                parts[owner[j]].append((j, x[r, keep]))
            bar.update(len(batch))
        bar.close()
        return [np.ascontiguousarray(np.concatenate([v for _, v in sorted(p, key=lambda t: t[0])]), np.float32)
                for p in parts]
