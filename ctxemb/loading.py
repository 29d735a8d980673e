"""Loading a pretrained encoder and its tokenizer by name or path, on ctxemb's own encoder or the transformers
backend."""

from __future__ import annotations

import os

import torch

from ctxemb._validation import check_choice, read_json_file
from ctxemb.config import SUPPORTED_MODEL_TYPES
from ctxemb.modeling.checkpoint import load_encoder_dir
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.transformers_backend import (TransformersEncoder, is_transformers_encoder_type,
                                                  tokenizer_from_transformers)
from ctxemb.registry import DEFAULT_MODEL, resolve_model_dir
from ctxemb.tokenization import Tokenizer

#: ``backend=`` choices: "native" (ctxemb's own encoder), "transformers" (``transformers.AutoModel``), or "auto":
#: native for the model types it implements (``ctxemb.config.SUPPORTED_MODEL_TYPES``), transformers for the others.
BACKENDS = ("auto", "native", "transformers")


def model_type_of(name_or_path: str | os.PathLike) -> str | None:
    """The ``model_type`` a model's ``config.json`` names (None when it names none).

    Raises:
        FileNotFoundError: the model cannot be found.
        CorruptFileError: ``config.json`` is not UTF-8 JSON holding an object.
    """
    value = read_json_file(resolve_model_dir(name_or_path) / "config.json", "config file").get("model_type")
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
    if backend != "auto":
        return backend
    model_type = model_type_of(name_or_path)
    if model_type in SUPPORTED_MODEL_TYPES or not is_transformers_encoder_type(model_type):
        return "native"  # which names the supported types and the transformers backend when it cannot load it
    return "transformers"


def load_encoder(name_or_path: str | os.PathLike = DEFAULT_MODEL, *, device: str | torch.device = "cpu",
                 strict: bool = True, backend: str = "auto") -> Encoder | TransformersEncoder:
    """Load a pretrained encoder in eval mode.

    Args:
        name_or_path: ``all-MiniLM-L6-v2`` (default), ``all-mpnet-base-v2``, an HF-format directory, or a model in
            the local Hugging Face hub cache. See :mod:`ctxemb.registry`.
        device: where to put the weights.
        strict: fail on missing or unexpected tensors (shape mismatches always fail); native backend only.
        backend: "auto" (ctxemb's own encoder where it implements the model type, transformers otherwise),
            "native" or "transformers".

    Raises:
        FileNotFoundError: the model cannot be found (the message says what to install or which paths were tried).
        CorruptFileError: (a ValueError) ``config.json`` is not UTF-8 JSON or has a bad field (e.g. a ``model_type``
            the native encoder does not implement, with ``backend="native"``);
            :class:`~ctxemb.modeling.checkpoint.CheckpointError` (a subclass): the weights are truncated, corrupt,
            not tensors, hold NaN/inf, or disagree with the config. Each names the file.
        ImportError: the transformers backend without transformers installed (the message names the extra).
    """
    model_dir = resolve_model_dir(name_or_path)
    if choose_backend(model_dir, backend) == "transformers":
        return TransformersEncoder.from_pretrained(model_dir).to(device)
    encoder, _ = load_encoder_dir(model_dir, strict=strict)
    return encoder.to(device)


def load_tokenizer(name_or_path: str | os.PathLike = DEFAULT_MODEL, *, max_length: int | None = None) -> Tokenizer:
    """Load the tokenizer that belongs to a model (see :func:`load_encoder` for names).

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
    model_dir = resolve_model_dir(name_or_path)
    model_type = model_type_of(model_dir)
    if model_type is None or model_type in SUPPORTED_MODEL_TYPES or not is_transformers_encoder_type(model_type):
        return Tokenizer.from_pretrained(model_dir, max_length=max_length)
    config = read_json_file(model_dir / "config.json", "config file")
    max_tokens = config.get("max_position_embeddings")
    return tokenizer_from_transformers(model_dir, max_length=max_length,
                                       max_tokens=max_tokens if isinstance(max_tokens, int) else None)
