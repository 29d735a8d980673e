"""The benchmarks: one module (or package) per benchmark, each run from the repository root as
``python -m benchmarks.NAME [options]`` (``--help`` lists them), each writing ``benchmarks/results/NAME.md`` and
``NAME.json``. :mod:`benchmarks.harness` is how every one of them times (warm-up, repeats, the median with min and
max), names the machine and writes its results; ``_common`` holds the real sentences of the shared data that
several of them read.
"""
