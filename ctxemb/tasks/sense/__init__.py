"""Sense training (BEM, SupCon) on a sense-annotated corpus, for nearest-sense WSD: settings, the sense inventory,
batches, the tasks."""
