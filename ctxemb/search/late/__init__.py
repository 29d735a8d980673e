"""Late interaction: documents as bags of contextual token vectors, scored by MaxSim (ColBERT).

- :mod:`~ctxemb.search.late.encoding`: queries and documents into token vectors, with ColBERT's conventions.
- :mod:`~ctxemb.search.late.codec`: token vectors compressed to a centroid id and b-bit residuals.
- :mod:`~ctxemb.search.late.index`: the compressed, memory-mapped index; candidates by centroid probes, MaxSim
  re-scoring.
- :mod:`~ctxemb.search.late.maxsim`: exact MaxSim, and a re-ranker over any candidate list with no index.
"""

from ctxemb.search.late.codec import ResidualCodec
from ctxemb.search.late.encoding import LateInteractionConfig, LateInteractionEncoder
from ctxemb.search.late.index import LateInteractionIndex
from ctxemb.search.late.maxsim import MaxSimReranker, maxsim

__all__ = ["LateInteractionConfig", "LateInteractionEncoder", "LateInteractionIndex", "MaxSimReranker",
           "ResidualCodec", "maxsim"]
