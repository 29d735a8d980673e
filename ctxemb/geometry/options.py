"""The names the geometry tools take, in a module that imports nothing heavy (the command line builds its flags from
them without loading NumPy or scikit-learn): the post-processings and what an analysis compares by default."""

from __future__ import annotations

#: The post-processings :func:`~ctxemb.geometry.postprocessing.make_postprocessor` builds by name, in the order
#: analyses report them.
POSTPROCESSOR_NAMES: tuple[str, ...] = ("none", "standardize", "center", "abtt", "whiten")
#: The words :func:`~ctxemb.geometry.analysis.analyze` projects unless told otherwise.
DEFAULT_WORDS: tuple[str, ...] = ("bank", "die", "mouse")
#: The post-processings an analysis compares with the raw vectors unless told otherwise.
DEFAULT_POSTPROCESSORS: tuple[str, ...] = ("standardize", "center", "abtt", "whiten")
