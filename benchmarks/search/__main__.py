"""``python -m benchmarks.search``: the SemanticIndex benchmark (:mod:`benchmarks.search`)."""

from benchmarks.search.cli import main

if __name__ == "__main__":
    main()
