"""Contrastive training of sentence embedders: data, hard-negative mining, settings, the task."""
