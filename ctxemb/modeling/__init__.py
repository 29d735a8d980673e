"""Encoder modules and checkpoint loading."""

from ctxemb.modeling.encoder import Encoder, EncoderOutput
from ctxemb.modeling.modernbert import ModernBertEncoder  # registers the modernbert family with Encoder

__all__ = ["Encoder", "EncoderOutput", "ModernBertEncoder"]
