"""Evaluation harnesses: what drives an embedder over a benchmark (:mod:`~ctxemb.evaluation.wsd` runs a
disambiguator over Raganato-format data sets, scored with :mod:`ctxemb.metrics.wsd`; :mod:`~ctxemb.evaluation.similarity`
runs the similarity benchmarks)."""
