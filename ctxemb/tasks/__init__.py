"""The task families, each in its own folder: ``sequence``, ``token``, ``qa``, ``contrastive``,
``late_interaction``, ``pretraining``, ``sense``. Each folder holds its reader, features, config, task (evaluation
with a primary metric, save, load, predict) and predictor; ``builtin`` registers every family with the one registry
of :mod:`ctxemb.training.registry`; ``catalog`` names the built-in tasks without importing torch."""
