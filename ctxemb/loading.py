"""Loading a pretrained encoder and its tokenizer by name or path."""

from __future__ import annotations

import os

import torch

from ctxemb.modeling.checkpoint import load_encoder_dir
from ctxemb.modeling.encoder import Encoder
from ctxemb.registry import DEFAULT_MODEL, resolve_model_dir
from ctxemb.tokenization import Tokenizer


def load_encoder(name_or_path: str | os.PathLike = DEFAULT_MODEL, *, device: str | torch.device = "cpu",
                 strict: bool = True) -> Encoder:
    """Load a pretrained encoder in eval mode.

    Args:
        name_or_path: ``all-MiniLM-L6-v2`` (default), ``all-mpnet-base-v2``, an HF-format directory, or a model in
            the local Hugging Face hub cache. See :mod:`ctxemb.registry`.
        device: where to put the weights.
        strict: fail on missing or unexpected tensors (shape mismatches always fail).

    Raises:
        FileNotFoundError: the model cannot be found (the message says what to install or which paths were tried).
        CorruptFileError: (a ValueError) ``config.json`` is not UTF-8 JSON or has a bad field (e.g. an unsupported
            ``model_type``); :class:`~ctxemb.modeling.checkpoint.CheckpointError` (a subclass): the weights are
            truncated, corrupt, not tensors, hold NaN/inf, or disagree with the config. Each names the file.
    """
    encoder, _ = load_encoder_dir(resolve_model_dir(name_or_path), strict=strict)
    return encoder.to(device)


def load_tokenizer(name_or_path: str | os.PathLike = DEFAULT_MODEL, *, max_length: int | None = None) -> Tokenizer:
    """Load the tokenizer that belongs to a model (see :func:`load_encoder` for names).

    Raises:
        FileNotFoundError: the model or its tokenizer files cannot be found.
        CorruptFileError: (a ValueError) ``tokenizer.json``, ``vocab.txt``, ``tokenizer_config.json``,
            ``special_tokens_map.json`` or ``config.json`` is not UTF-8, not valid JSON, not a tokenizer, has a field
            of the wrong type, or lacks a special token; the message names the file.
    """
    return Tokenizer.from_pretrained(resolve_model_dir(name_or_path), max_length=max_length)
