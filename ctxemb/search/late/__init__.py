"""Late interaction: documents as bags of contextual token vectors, scored by MaxSim (ColBERT).

- :mod:`~ctxemb.search.late.encoding`: queries and documents into token vectors, with ColBERT's conventions.
- :mod:`~ctxemb.search.late.codec`: token vectors compressed to a centroid id and b-bit residuals.
- :mod:`~ctxemb.search.late.index`: the compressed, memory-mapped index; candidates by centroid probes, MaxSim
  re-scoring.
- :mod:`~ctxemb.search.late.scoring`: exact MaxSim, and a re-ranker over any candidate list with no index.
- :mod:`~ctxemb.search.late.pooling`: token pooling (fewer vectors per document).

The names below are imported on first use, so that a process that only searches an index does not load torch.
"""

from __future__ import annotations

from ctxemb.core.lazy import lazy_exports

_EXPORTS = {
    "LateInteractionConfig": "ctxemb.modeling.late_interaction",
    "LateInteractionEncoder": "ctxemb.search.late.encoding",
    "LateInteractionIndex": "ctxemb.search.late.index",
    "MaxSimReranker": "ctxemb.search.late.scoring",
    "ResidualCodec": "ctxemb.search.late.codec",
    "maxsim": "ctxemb.search.late.scoring",
    "pool_documents": "ctxemb.search.late.pooling",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
