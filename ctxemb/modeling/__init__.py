"""Encoder modules and checkpoint loading."""

from ctxemb.modeling.encoder import Encoder, EncoderOutput

__all__ = ["Encoder", "EncoderOutput"]
