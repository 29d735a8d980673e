"""Tiny models, data and scripts that the training tests (and the torchrun runs they launch) share."""
