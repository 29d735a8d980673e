"""Peers run beside ctxemb's benchmarks, each in its own environment (its module docstring says which), e.g.
``/work/peers/pylate-venv/bin/python -m benchmarks.peers.pylate_scifact``."""
