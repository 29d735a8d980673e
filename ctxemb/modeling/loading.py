"""Loading a pretrained model by name or path, on ctxemb's own encoder or the transformers backend: the name is
resolved once, ``config.json`` read once here.

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

from ctxemb.core.validation import CorruptFileError, check_choice, read_json_file
from ctxemb.models.encoder_config import SUPPORTED_MODEL_TYPES, encoder_model_type
from ctxemb.modeling.checkpoint import TRAINING_RUN_KEY, load_encoder_dir
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.transformers_backend import (TransformersEncoder, is_transformers_encoder_type,
                                                  tokenizer_from_transformers)
from ctxemb.models.hub import DEFAULT_MODEL, resolve_model_dir
from ctxemb.models.tokenization import Tokenizer

#: ``backend=`` choices: "native" (ctxemb's own encoder), "transformers" (``transformers.AutoModel``), or "auto":
#: native for the model types it implements (``ctxemb.models.encoder_config.SUPPORTED_MODEL_TYPES``), transformers for the others.
BACKENDS = ("auto", "native", "transformers")


def model_type_of(name_or_path: str | os.PathLike) -> str | None:
    """The ``model_type`` a model's ``config.json`` names (the encoder's family for a model saved with ctxemb's
    ``"model_type": "ctxemb"``; None when it names none).

    Raises:
        FileNotFoundError: the model cannot be found.
        CorruptFileError: ``config.json`` is not UTF-8 JSON holding an object.
    """
    value = encoder_model_type(read_json_file(resolve_model_dir(name_or_path) / "config.json", "config file"))
    return value if isinstance(value, str) else None


def choose_backend(name_or_path: str | os.PathLike, backend: str = "auto") -> str:
    """"native" or "transformers" for this model and ``backend`` choice (see :data:`BACKENDS`).

    "auto" picks the transformers backend for a model type ctxemb does not implement when transformers is installed
    and knows it as a bidirectional encoder (a model type with a masked-language-model class, e.g. ``deberta-v2``,
    ``albert``); anything else (e.g. a decoder such as ``gpt2``) stays "native", whose loader then says which model
    types are supported.

    Raises:
        ValueError: ``backend`` is not one of :data:`BACKENDS`.
    """
    check_choice(backend, "backend", BACKENDS)
    return backend if backend != "auto" else _backend_for(model_type_of(name_or_path))


def _backend_for(model_type: Any) -> str:
    """"auto"'s choice for a ``model_type`` (see :func:`choose_backend`)."""
    if model_type in SUPPORTED_MODEL_TYPES or not is_transformers_encoder_type(model_type):
        return "native"  # which names the supported types and the transformers backend when it cannot load it
    return "transformers"


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
    encoder: Encoder | TransformersEncoder
    tokenizer: Tokenizer
    training_run: str | None


def load_model(name_or_path: str | os.PathLike = DEFAULT_MODEL, *, device: str | torch.device = "cpu",
               strict: bool = True, max_length: int | None = None, backend: str = "auto",
               revision: str | None = None, local_files_only: bool = False) -> LoadedModel:
    """Load a pretrained encoder, its tokenizer and its training-run identity, resolving the name once.

    Args:
        name_or_path: ``all-MiniLM-L6-v2`` (default), ``all-mpnet-base-v2``, an HF-format directory, or a model
            named as on the Hugging Face Hub (``org/name``, ``org/name@revision``), fetched into the Hugging Face
            cache. See :mod:`ctxemb.models.hub`.
        device: where to put the weights.
        strict: fail on missing or unexpected tensors (shape mismatches always fail).
        max_length: the tokenizer's most tokens per model input (None: the model's).
        backend: "auto", "native" or "transformers" (see :func:`choose_backend`).
        revision: the branch, tag or commit of a Hub model (default its main branch).
        local_files_only: resolve a Hub model from the cache alone, as ``HF_HUB_OFFLINE=1`` does.

    Returns:
        A :class:`LoadedModel`.

    Raises:
        TypeError: ``name_or_path`` is not a str or path.
        FileNotFoundError: the model cannot be found (the message says what was tried and what to install, or why
            the Hub failed), or its weights or tokenizer files are missing.
        CorruptFileError: (a ValueError) ``config.json`` is not UTF-8 JSON, has a bad field (e.g. an unsupported
            ``model_type``) or a training-run identity that is not a non-empty string; a tokenizer file is
            unreadable; :class:`~ctxemb.modeling.checkpoint.CheckpointError` (a subclass): the weights are
            truncated, corrupt, not tensors, hold NaN/inf, or disagree with the config. Each names the file.
    """
    check_choice(backend, "backend", BACKENDS)
    model_dir = resolve_model_dir(name_or_path, revision=revision, local_files_only=local_files_only)
    config_path = model_dir / "config.json"
    config = read_json_file(config_path, "config file")
    training_run = _training_run(config, config_path)
    model_type = encoder_model_type(config)
    if (backend if backend != "auto" else _backend_for(model_type)) == "transformers":
        encoder = TransformersEncoder.from_pretrained(model_dir)
    else:
        # load_encoder_dir reads config.json once more (it takes a directory); the tokenizer and the run share this read
        encoder, _ = load_encoder_dir(model_dir, strict=strict)
    return LoadedModel(model_dir, encoder.to(device), _tokenizer(model_dir, config, max_length), training_run)


def _training_run(config: Mapping[str, Any], path: Path) -> str | None:
    """The training-run identity in a ``config.json`` dict, checked as
    :func:`ctxemb.modeling.checkpoint.read_training_run` checks it."""
    value = config.get(TRAINING_RUN_KEY)
    if value is not None and (not isinstance(value, str) or not value):
        raise CorruptFileError(f"config file {path}: {TRAINING_RUN_KEY} must be a non-empty string, got {value!r}",
                               path)
    return value


def load_encoder(name_or_path: str | os.PathLike = DEFAULT_MODEL, *, device: str | torch.device = "cpu",
                 strict: bool = True, backend: str = "auto", revision: str | None = None,
                 local_files_only: bool = False) -> Encoder | TransformersEncoder:
    """Load a pretrained encoder in eval mode (:func:`load_model` loads it with its tokenizer and training run).

    Args:
        name_or_path: ``all-MiniLM-L6-v2`` (default), ``all-mpnet-base-v2``, an HF-format directory, or a model
            named as on the Hugging Face Hub (``org/name``). See :mod:`ctxemb.models.hub`.
        device: where to put the weights.
        strict: fail on missing or unexpected tensors (shape mismatches always fail); native backend only.
        backend: "auto" (ctxemb's own encoder where it implements the model type, transformers otherwise),
            "native" or "transformers".
        revision, local_files_only: for a Hub model, as in :func:`load_model`.

    Raises:
        FileNotFoundError: the model cannot be found (the message says what to install or which paths were tried).
        CorruptFileError: (a ValueError) ``config.json`` is not UTF-8 JSON or has a bad field (e.g. a ``model_type``
            the native encoder does not implement, with ``backend="native"``);
            :class:`~ctxemb.modeling.checkpoint.CheckpointError` (a subclass): the weights are truncated, corrupt,
            not tensors, hold NaN/inf, or disagree with the config. Each names the file.
        ImportError: the transformers backend without transformers installed (the message names the extra).
    """
    model_dir = resolve_model_dir(name_or_path, revision=revision, local_files_only=local_files_only)
    if choose_backend(model_dir, backend) == "transformers":
        return TransformersEncoder.from_pretrained(model_dir).to(device)
    encoder, _ = load_encoder_dir(model_dir, strict=strict)
    return encoder.to(device)


def load_tokenizer(name_or_path: str | os.PathLike = DEFAULT_MODEL, *, max_length: int | None = None,
                   revision: str | None = None, local_files_only: bool = False) -> Tokenizer:
    """Load the tokenizer that belongs to a model (see :func:`load_model` for names, ``revision`` and
    ``local_files_only``).

    ctxemb reads the tokenizer files itself for the model types its encoder implements; for the others it converts
    the fast tokenizer ``transformers.AutoTokenizer`` loads (see
    :func:`~ctxemb.modeling.transformers_backend.tokenizer_from_transformers`).

    Raises:
        FileNotFoundError: the model or its tokenizer files cannot be found.
        CorruptFileError: (a ValueError) ``tokenizer.json``, ``vocab.txt``, ``tokenizer_config.json``,
            ``special_tokens_map.json`` or ``config.json`` is not UTF-8, not valid JSON, not a tokenizer, has a field
            of the wrong type, or lacks a special token; the message names the file.
        ValueError: another model type's tokenizer gives no character offsets (a Python tokenizer) or does not frame
            texts with one special token on each side.
        ImportError: another model type's tokenizer without transformers installed.
    """
    model_dir = resolve_model_dir(name_or_path, revision=revision, local_files_only=local_files_only)
    return _tokenizer(model_dir, read_json_file(model_dir / "config.json", "config file"), max_length)


def _tokenizer(model_dir: Path, config: Mapping[str, Any], max_length: int | None) -> Tokenizer:
    """The tokenizer of the model in ``model_dir`` whose ``config.json`` holds ``config``."""
    model_type = encoder_model_type(config)
    if not isinstance(model_type, str) or model_type in SUPPORTED_MODEL_TYPES \
            or not is_transformers_encoder_type(model_type):
        return Tokenizer.from_pretrained(model_dir, max_length=max_length, config=config)
    max_tokens = config.get("max_position_embeddings")
    return tokenizer_from_transformers(model_dir, max_length=max_length,
                                       max_tokens=max_tokens if isinstance(max_tokens, int) else None)
