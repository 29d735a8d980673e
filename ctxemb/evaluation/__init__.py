"""Evaluation harnesses: the WSD scorer (:mod:`ctxemb.evaluation.wsd`) and similarity benchmarks."""
