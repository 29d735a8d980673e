"""The embedding API: :class:`Embedder` (layer and subword pooling over an encoder's hidden states), its settings,
a corpus embedded into one array (one process, torchrun) or into vector shards by a pool of Ray actors, fill-mask,
and the sentence-transformers directory format (read, checked against its encoder, written).

The names below are imported on first use, so that reading :mod:`ctxemb.embedding.config` loads no torch.
"""

from __future__ import annotations

from ctxemb.core.lazy import lazy_exports

_EXPORTS = {
    "Embedder": "ctxemb.embedding.embedder",
    "EmbedderConfig": "ctxemb.embedding.config",
    "PlannedBatch": "ctxemb.embedding.embedder",
    "QueryEncoder": "ctxemb.embedding.query",
    "SENTENCE_POOLINGS": "ctxemb.embedding.st_format",
}

__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
