"""Peers run beside ctxemb's benchmarks: in ctxemb's own environment when they install there without moving a pin
(OpenVINO, imported by ``benchmarks.encode_throughput``), else each in its own environment (its module docstring says
which), e.g. ``/work/peers/pylate-venv/bin/python -m benchmarks.peers.pylate_scifact``."""
