"""Loading a pretrained model by name or path: the name is resolved once, ``config.json`` read once here.

:func:`load_model` is the one way from a model name to what runs it: the encoder, its tokenizer and the training
run that made it (see :func:`ctxemb.modeling.checkpoint.stamp_training_run`). :func:`load_encoder` and
:func:`load_tokenizer` load one of the two.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from ctxemb._validation import CorruptFileError, read_json_file
from ctxemb.modeling.checkpoint import TRAINING_RUN_KEY, load_encoder_dir
from ctxemb.modeling.encoder import Encoder
from ctxemb.registry import DEFAULT_MODEL, resolve_model_dir
from ctxemb.tokenization import Tokenizer


@dataclass(frozen=True)
class LoadedModel:
    """A model loaded by :func:`load_model`.

    Attributes:
        model_dir: the HF-format directory the name resolved to.
        encoder: the encoder, in eval mode, on the device asked for.
        tokenizer: its tokenizer.
        training_run: the identity of the ctxemb training run that made the weights (None for a model no ctxemb
            recipe stamped, such as a released checkpoint).
    """

    model_dir: Path
    encoder: Encoder
    tokenizer: Tokenizer
    training_run: str | None


def load_model(name_or_path: str | os.PathLike = DEFAULT_MODEL, *, device: str | torch.device = "cpu",
               strict: bool = True, max_length: int | None = None) -> LoadedModel:
    """Load a pretrained encoder, its tokenizer and its training-run identity, resolving the name once.

    Args:
        name_or_path: ``all-MiniLM-L6-v2`` (default), ``all-mpnet-base-v2``, an HF-format directory, or a model in
            the local Hugging Face hub cache. See :mod:`ctxemb.registry`.
        device: where to put the weights.
        strict: fail on missing or unexpected tensors (shape mismatches always fail).
        max_length: the tokenizer's most tokens per model input (None: the model's).

    Returns:
        A :class:`LoadedModel`.

    Raises:
        TypeError: ``name_or_path`` is not a str or path.
        FileNotFoundError: the model cannot be found (the message says what to install or which paths were tried),
            or its weights or tokenizer files are missing.
        CorruptFileError: (a ValueError) ``config.json`` is not UTF-8 JSON, has a bad field (e.g. an unsupported
            ``model_type``) or a training-run identity that is not a non-empty string; a tokenizer file is
            unreadable; :class:`~ctxemb.modeling.checkpoint.CheckpointError` (a subclass): the weights are
            truncated, corrupt, not tensors, hold NaN/inf, or disagree with the config. Each names the file.
    """
    model_dir = resolve_model_dir(name_or_path)
    config_path = model_dir / "config.json"
    config = read_json_file(config_path, "config file")
    training_run = _training_run(config, config_path)
    # load_encoder_dir reads config.json once more (it takes a directory); the tokenizer and the run share this read.
    encoder, _ = load_encoder_dir(model_dir, strict=strict)
    tokenizer = Tokenizer.from_pretrained(model_dir, max_length=max_length, config=config)
    return LoadedModel(model_dir, encoder.to(device), tokenizer, training_run)


def _training_run(config: Mapping[str, Any], path: Path) -> str | None:
    """The training-run identity in a ``config.json`` dict, checked as
    :func:`ctxemb.modeling.checkpoint.read_training_run` checks it."""
    value = config.get(TRAINING_RUN_KEY)
    if value is not None and (not isinstance(value, str) or not value):
        raise CorruptFileError(f"config file {path}: {TRAINING_RUN_KEY} must be a non-empty string, got {value!r}",
                               path)
    return value


def load_encoder(name_or_path: str | os.PathLike = DEFAULT_MODEL, *, device: str | torch.device = "cpu",
                 strict: bool = True) -> Encoder:
    """Load a pretrained encoder in eval mode (:func:`load_model` loads it with its tokenizer and training run).

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
