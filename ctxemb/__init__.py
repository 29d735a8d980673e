"""ctxemb: contextual embeddings from bidirectional transformer encoders.

The main entry points are imported lazily, so that ``import ctxemb`` stays cheap:
``Embedder``, ``EmbedderConfig``, ``load_model`` (encoder, tokenizer and training run of a model name),
``load_encoder``, ``load_tokenizer``, ``Encoder``, ``EncoderConfig``, and
``CorruptFileError`` (a ``ValueError``: a file the library reads is damaged; its message and ``path`` name it).
"""

from __future__ import annotations

from ctxemb import _compat
from ctxemb.core.lazy import lazy_exports

from ctxemb._version import __version__  # noqa: F401  (re-exported: ctxemb.__version__)

_EXPORTS = {
    "Embedder": "ctxemb.embedding.embedder",
    "EmbedderConfig": "ctxemb.embedding.config",
    "load_model": "ctxemb.modeling.loading",
    "LoadedModel": "ctxemb.modeling.loading",
    "load_encoder": "ctxemb.modeling.loading",
    "load_tokenizer": "ctxemb.modeling.loading",
    "Encoder": "ctxemb.modeling.encoder",
    "EncoderConfig": "ctxemb.models.encoder_config",
    "CorruptFileError": "ctxemb.core.validation",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

_compat.install()  # old import paths of moved modules keep working, with a DeprecationWarning
