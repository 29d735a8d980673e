"""Reading and writing Hugging Face-format checkpoint directories (``config.json`` + weights).

Checkpoints name their tensors in several dialects: with or without a base-model prefix (``bert.``, ``roberta.``,
``mpnet.``, ``distilbert.``, ``electra.``, ModernBERT's ``model.``), with the old TensorFlow-era ``gamma``/``beta``
LayerNorm names, for MPNet with ``attention.attn.q`` and for DistilBERT with ``attention.q_lin`` where BERT says
``attention.self.query``. :func:`canonical_state_dict` maps all of them onto the names of
:class:`ctxemb.modeling.encoder.Encoder` (ModernBERT's own names are kept: its encoder uses them);
:func:`save_pretrained` maps back, so that transformers loads what we save.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file as load_safetensors
from safetensors.torch import save_file as save_safetensors

from ctxemb.core.validation import CorruptFileError, read_json_file
from ctxemb.models.encoder_config import BASE_MODEL_PREFIXES, EncoderConfig
from ctxemb.modeling.encoder import Encoder
from ctxemb.core.atomic import atomic_path, atomic_write

logger = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# config.json key naming the training run that made a saved model's weights (see stamp_training_run).
TRAINING_RUN_KEY = "ctxemb_training_run"

# Head names, kept apart from the encoder's tensors: pretraining heads (BERT's ``cls.*``; RoBERTa/MPNet's
# ``lm_head.*`` is mapped onto the BERT names) and the task heads: transformers' ``classifier.*`` (sequence and token
# classification) and ``qa_outputs.*`` (question answering), and ctxemb's ``crf.*`` and ``span_classifier.*``.
HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.", "crf.", "span_classifier.",
                 # ELECTRA's discriminator and generator heads; DistilBERT's MLM and classification heads; ModernBERT's
                 # prediction head and decoder: none is part of the encoder.
                 "discriminator_predictions.", "generator_predictions.", "generator_lm_head.",
                 "vocab_transform.", "vocab_layer_norm.", "vocab_projector.", "pre_classifier.", "head.", "decoder.")
# Families whose MLM head transformers calls ``lm_head`` (mapped onto BERT's ``cls.predictions``).
_LM_HEAD_MODEL_TYPES = ("roberta", "xlm-roberta", "mpnet")
_LM_HEAD_TO_BERT = [
    ("lm_head.dense.", "cls.predictions.transform.dense."),
    ("lm_head.layer_norm.", "cls.predictions.transform.LayerNorm."),
    ("lm_head.decoder.", "cls.predictions.decoder."),
    ("lm_head.bias", "cls.predictions.bias"),
]
_MPNET_TO_BERT = [
    ("attention.attn.q.", "attention.self.query."),
    ("attention.attn.k.", "attention.self.key."),
    ("attention.attn.v.", "attention.self.value."),
    ("attention.attn.o.", "attention.output.dense."),
    ("attention.LayerNorm.", "attention.output.LayerNorm."),
]
# DistilBERT's block under BERT's names (its ``transformer.layer`` is mapped to ``encoder.layer`` first). The inverse
# is looked up in this order, so ``attention.output.*`` is matched before ``output.*``.
_DISTILBERT_TO_BERT = [
    ("attention.q_lin.", "attention.self.query."),
    ("attention.k_lin.", "attention.self.key."),
    ("attention.v_lin.", "attention.self.value."),
    ("attention.out_lin.", "attention.output.dense."),
    ("sa_layer_norm.", "attention.output.LayerNorm."),
    ("ffn.lin1.", "intermediate.dense."),
    ("ffn.lin2.", "output.dense."),
    ("output_layer_norm.", "output.LayerNorm."),
]
# Buffers some checkpoints carry that are recomputed here.
_IGNORED = re.compile(r"(^|\.)position_ids$")


class CheckpointError(CorruptFileError):
    """A weights file that cannot be read (corrupt, truncated, not a checkpoint) or that does not fit the
    configuration (missing, unexpected or mis-shaped tensors). A :class:`~ctxemb.core.validation.CorruptFileError`,
    hence a ``ValueError``."""


def find_weights_file(model_dir: Path) -> Path:
    for name in WEIGHT_FILES:
        if (model_dir / name).is_file():
            return model_dir / name
    raise FileNotFoundError(
        f"no weights file in {model_dir}: expected one of {', '.join(WEIGHT_FILES)}"
    )


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Read tensors from a ``.safetensors`` or ``.bin`` file.

    ``.bin`` files are read with ``torch.load(weights_only=True)``: a pickle that holds anything but tensors and
    plain containers is refused, never executed.

    Returns:
        Tensor name -> tensor (on the CPU).

    Raises:
        FileNotFoundError, PermissionError, IsADirectoryError: the file cannot be opened.
        CheckpointError: the file is truncated, corrupt, not a checkpoint, or not a mapping of names to tensors; the
            message names the file and says what is wrong, in one line.
    """
    path = Path(path)
    with open(path, "rb"):  # opening errors (missing, permissions, a directory) keep their own type and message
        pass
    if path.stat().st_size == 0:
        raise CheckpointError(f"cannot read weights file {path}: it is empty (0 bytes); download or save it again",
                              path)
    try:
        if path.suffix == ".safetensors":
            state = load_safetensors(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        detail = str(e).split("WeightsUnpickler error:", 1)[-1].split("Check the documentation")[0]
        detail = " ".join(detail.split()).split(". ")[0]
        if "Unsupported global" in detail:
            what = (f"it holds Python objects other than tensors ({detail}), which are never loaded from a pickle "
                    "(they could run code)")
        else:
            what = f"corrupt, truncated, or not a PyTorch checkpoint ({detail or 'unreadable pickle'})"
        raise CheckpointError(f"cannot read weights file {path}: {what}", path) from e
    except (SafetensorError, RuntimeError, OSError, EOFError, ValueError, zipfile.BadZipFile, KeyError,
            AttributeError, IndexError, TypeError, MemoryError, OverflowError) as e:
        raise CheckpointError(
            f"cannot read weights file {path} (truncated, corrupt or not a checkpoint): {_one_line(e)}", path) from e
    if not isinstance(state, dict):
        raise CheckpointError(f"weights file {path} holds a {type(state).__name__}, not a mapping of tensor names to "
                              "tensors", path)
    bad = [k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(f"weights file {path} holds {len(bad)} entries that are not named tensors "
                              f"(first: {bad[0]!r}); expected a state dict of tensors", path)
    return state


def _check_finite(state: Mapping[str, torch.Tensor], path: Path) -> None:
    """Refuse NaN or infinite weights: they would make every embedding NaN without a word."""
    for name, t in state.items():
        # A sum is finite when every value is (for weights of ordinary size): one cheap pass, the exact check only
        # when it is not.
        if t.is_floating_point() and not bool(torch.isfinite(t.sum())) and not bool(torch.isfinite(t).all()):
            n_bad = int((~torch.isfinite(t)).sum())
            raise CheckpointError(f"weights file {path}: tensor {name} holds {n_bad} NaN or infinite values "
                                  "(a diverged training run or a corrupt file)", path)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _replace_prefix(key: str, table: list[tuple[str, str]], *, anywhere: bool) -> str:
    for old, new in table:
        if anywhere and old in key:
            return key.replace(old, new)
        if not anywhere and key.startswith(old):
            return new + key[len(old):]
    return key


def canonical_state_dict(state: dict[str, torch.Tensor], model_type: str) -> dict[str, torch.Tensor]:
    """Map a checkpoint's tensor names onto ours (prefix stripped, gamma/beta renamed, MPNet and lm_head mapped)."""
    out = {}
    prefix = BASE_MODEL_PREFIXES[model_type] + "."  # XLM-R checkpoints say ``roberta.``
    for key, tensor in state.items():
        if _IGNORED.search(key):
            continue
        if key.startswith(prefix):
            key = key[len(prefix):]
        key = re.sub(r"\.gamma$", ".weight", key)
        key = re.sub(r"\.beta$", ".bias", key)
        key = _replace_prefix(key, _LM_HEAD_TO_BERT, anywhere=False)
        if model_type == "mpnet":
            key = _replace_prefix(key, _MPNET_TO_BERT, anywhere=True)
        if model_type == "distilbert":
            key = _replace_prefix(key, [("transformer.layer.", "encoder.layer.")], anywhere=False)
            key = _replace_prefix(key, _DISTILBERT_TO_BERT, anywhere=True)
        out[key] = tensor
    return out


def hf_state_dict(state: dict[str, torch.Tensor], model_type: str) -> dict[str, torch.Tensor]:
    """Inverse of :func:`canonical_state_dict`: the names transformers expects for this ``model_type``."""
    out = {}
    for key, tensor in state.items():
        if model_type in _LM_HEAD_MODEL_TYPES:
            key = _replace_prefix(key, [(b, a) for a, b in _LM_HEAD_TO_BERT], anywhere=False)
        if model_type == "mpnet":
            key = _replace_prefix(key, [(b, a) for a, b in _MPNET_TO_BERT], anywhere=True)
        if model_type == "distilbert":
            key = _replace_prefix(key, [(b, a) for a, b in _DISTILBERT_TO_BERT], anywhere=True)
            key = key.replace("encoder.layer.", "transformer.layer.", 1)
        out[key] = tensor
    return out


def load_weights_into(module: torch.nn.Module, state: dict[str, torch.Tensor], *, strict: bool = True,
                      source: str = "checkpoint") -> None:
    """Copy ``state`` into ``module`` after checking every name and shape.

    Raises:
        CheckpointError: naming every missing key, unexpected key and shape mismatch (when ``strict``; otherwise
            missing and unexpected keys are logged and shape mismatches still raise).
    """
    own = module.state_dict()
    missing = sorted(k for k in own if k not in state)
    unexpected = sorted(k for k in state if k not in own)
    mismatched = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
                  for k in own if k in state and state[k].shape != own[k].shape]
    problems = []
    if mismatched:
        problems.append("shape mismatches: " + "; ".join(mismatched))
    if strict and missing:
        problems.append("missing keys: " + ", ".join(missing))
    if strict and unexpected:
        problems.append("unexpected keys: " + ", ".join(unexpected))
    if problems:
        raise CheckpointError(f"{source} does not match the configuration: " + " | ".join(problems))
    if missing:
        logger.warning("%s: %d missing keys left at their initial values: %s", source, len(missing), missing)
    if unexpected:
        logger.warning("%s: %d unexpected keys ignored: %s", source, len(unexpected), unexpected)
    module.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)


def split_heads(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Split canonical tensors into (encoder tensors, head tensors: pretraining ``cls.*`` and task ``classifier.*``)."""
    trunk, heads = {}, {}
    for k, v in state.items():
        (heads if k.startswith(HEAD_PREFIXES) else trunk)[k] = v
    return trunk, heads


def load_encoder_dir(model_dir: str | os.PathLike, *, strict: bool = True,
                     new_head: bool = False) -> tuple[Encoder, dict[str, torch.Tensor]]:
    """Build an :class:`Encoder` from an HF-format directory.

    Args:
        new_head: leave the checkpoint's head tensors out (logged), so that the caller initialises a new head on a
            fine-tuned encoder (intermediate-task transfer).

    Returns:
        (encoder in eval mode, head tensors found in the checkpoint with canonical names: pretraining ``cls.*``
        and task ``classifier.*``; may be empty, and is with ``new_head``).

    Raises:
        FileNotFoundError: the directory, its ``config.json`` or its weights are missing.
        CorruptFileError: ``config.json`` is unreadable (not UTF-8, not JSON) or has a bad field, e.g. an
            unsupported ``model_type`` (a ValueError).
        CheckpointError: the weights are unreadable, hold NaN/inf, or do not match the configuration.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model directory not found: {model_dir}")
    config = EncoderConfig.from_json_file(model_dir / "config.json")
    weights = find_weights_file(model_dir)
    state = canonical_state_dict(read_state_dict(weights), config.model_type)
    _check_finite(state, weights)
    trunk, heads = split_heads(state)
    encoder = Encoder(config)
    if encoder.pooler is not None and "pooler.dense.weight" not in trunk:
        # Several released checkpoints (e.g. RoBERTa exports) drop the pooler; it is not needed for embeddings.
        logger.info("%s has no pooler weights; the pooler is initialised fresh", weights)
        own = encoder.state_dict()
        trunk.update({k: own[k] for k in ("pooler.dense.weight", "pooler.dense.bias")})
    load_weights_into(encoder, trunk, strict=strict, source=str(weights))
    encoder.eval()
    if new_head and heads:
        logger.info("%s: new_head=True: its %d head tensors are ignored, a new head is initialised", model_dir,
                    len(heads))
        heads = {}
    return encoder, heads


def save_pretrained(encoder: Encoder, out_dir: str | os.PathLike, *,
                    extra_tensors: dict[str, torch.Tensor] | None = None,
                    architectures: Sequence[str] | None = None,
                    config_extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``config.json`` and ``model.safetensors`` in the layout transformers reads.

    Args:
        encoder: the encoder to save.
        out_dir: target directory (created).
        extra_tensors: task-head tensors with canonical names (``cls.*``, ``classifier.*``, ...). When given, the
            encoder's tensors go under its base-model prefix (``bert.``, ``roberta.``, ``mpnet.``), as in the
            checkpoints of transformers' task models; a bare encoder is saved without a prefix.
        architectures: the transformers classes for ``config.json`` (the bare encoder's when None).
        config_extra: further ``config.json`` keys (e.g. ``id2label``).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = encoder.config.base_model_prefix + "." if extra_tensors else ""
    state = {prefix + k: v.detach().to("cpu", torch.float32).contiguous() for k, v in encoder.state_dict().items()}
    for k, v in (extra_tensors or {}).items():
        state[k] = v.detach().to("cpu", torch.float32).contiguous().clone()
    state = hf_state_dict(state, encoder.config.model_type)
    with atomic_path(out_dir / "model.safetensors") as tmp:
        save_safetensors(state, str(tmp), metadata={"format": "pt"})
    encoder.config.to_json_file(out_dir / "config.json", architectures=architectures, extra=config_extra)
    return out_dir


def stamp_training_run(model_dir: str | os.PathLike, label: str) -> str:
    """Record which training run made a saved model: ``config.json`` gets ``"ctxemb_training_run": "<label>-<digest>"``,
    the digest being the first 16 hex digits of the SHA-256 of the weights file.

    The identity follows the weights, not the folder: two runs saved to the same path get different identities,
    and a resumed run that ends with bit-identical weights gets the same one as the uninterrupted run. The
    :class:`~ctxemb.embedding.embedder.Embedder` reads it into its configuration, so a sense store or search index built with
    one fine-tuned encoder refuses queries from another with the same architecture and pooling.

    Args:
        model_dir: an HF-format directory written by :func:`save_pretrained`.
        label: a readable prefix naming the recipe (e.g. ``"wsd-bem"``); letters, digits, ``.``, ``_``, ``-``.

    Returns:
        The identity written.

    Raises:
        ValueError: ``label`` is empty or has other characters.
        FileNotFoundError: no ``config.json`` or weights file.
    """
    if not isinstance(label, str) or not label or not all(c.isalnum() or c in "._-" for c in label):
        raise ValueError(f"label must be a non-empty string of letters, digits, '.', '_' or '-', got {label!r}")
    model_dir = Path(model_dir)
    weights = find_weights_file(model_dir)
    digest = hashlib.sha256()
    with open(weights, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    run_id = f"{label}-{digest.hexdigest()[:16]}"
    config = read_json_file(model_dir / "config.json", "config file")
    config[TRAINING_RUN_KEY] = run_id
    with atomic_write(model_dir / "config.json") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    return run_id


def read_training_run(model_dir: str | os.PathLike) -> str | None:
    """The training-run identity recorded in a model directory's ``config.json`` (None: none recorded, as for
    released checkpoints).

    Raises:
        CorruptFileError: ``config.json`` is unreadable, or its identity is not a non-empty string.
    """
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    value = read_json_file(path, "config file").get(TRAINING_RUN_KEY)
    if value is not None and (not isinstance(value, str) or not value):
        raise CorruptFileError(f"config file {path}: {TRAINING_RUN_KEY} must be a non-empty string, got {value!r}",
                               path)
    return value
