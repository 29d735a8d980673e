"""ctxemb: contextual embeddings from bidirectional transformer encoders."""

__version__ = "0.1.0"
