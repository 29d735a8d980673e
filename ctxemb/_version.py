"""The package version, in a module of its own so that lower layers can record it (cache keys) without importing
the top-level package."""

__version__ = "0.1.0"
