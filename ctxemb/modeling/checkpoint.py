"""Reading and writing Hugging Face-format checkpoint directories (``config.json`` + weights).

Checkpoints name their tensors in several dialects: with or without a ``bert.``/``roberta.``/``mpnet.`` prefix,
with the old TensorFlow-era ``gamma``/``beta`` LayerNorm names, and, for MPNet, with ``attention.attn.q`` where BERT
says ``attention.self.query``. :func:`canonical_state_dict` maps all of them onto the names of
:class:`ctxemb.modeling.encoder.Encoder`; :func:`save_pretrained` maps back, so that transformers loads what we save.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file as load_safetensors
from safetensors.torch import save_file as save_safetensors

from ctxemb.config import BASE_MODEL_PREFIXES, EncoderConfig
from ctxemb.modeling.encoder import Encoder
from ctxemb.paths import atomic_path

logger = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")

# Head names, kept apart from the encoder's tensors: pretraining heads (BERT's ``cls.*``; RoBERTa/MPNet's
# ``lm_head.*`` is mapped onto the BERT names) and the task heads: transformers' ``classifier.*`` (sequence and token
# classification) and ``qa_outputs.*`` (question answering), and ctxemb's ``crf.*`` and ``span_classifier.*``.
HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.", "crf.", "span_classifier.")
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
# Buffers some checkpoints carry that are recomputed here.
_IGNORED = re.compile(r"(^|\.)position_ids$")


class CheckpointError(ValueError):
    """A checkpoint that does not fit the configuration (missing, unexpected or mis-shaped tensors)."""


def find_weights_file(model_dir: Path) -> Path:
    for name in WEIGHT_FILES:
        if (model_dir / name).is_file():
            return model_dir / name
    raise FileNotFoundError(
        f"no weights file in {model_dir}: expected one of {', '.join(WEIGHT_FILES)}"
    )


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Read tensors from a ``.safetensors`` or ``.bin`` file, with a clear error for unreadable files."""
    path = Path(path)
    try:
        if path.suffix == ".safetensors":
            return load_safetensors(str(path))
        return torch.load(path, map_location="cpu", weights_only=True)
    except (SafetensorError, RuntimeError, OSError, EOFError, ValueError) as e:
        raise CheckpointError(f"cannot read weights file {path} (corrupt or not a checkpoint): {e}") from e


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
        out[key] = tensor
    return out


def hf_state_dict(state: dict[str, torch.Tensor], model_type: str) -> dict[str, torch.Tensor]:
    """Inverse of :func:`canonical_state_dict`: the names transformers expects for this ``model_type``."""
    out = {}
    for key, tensor in state.items():
        if model_type != "bert":
            key = _replace_prefix(key, [(b, a) for a, b in _LM_HEAD_TO_BERT], anywhere=False)
        if model_type == "mpnet":
            key = _replace_prefix(key, [(b, a) for a, b in _MPNET_TO_BERT], anywhere=True)
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


def load_encoder_dir(model_dir: str | os.PathLike, *, strict: bool = True) -> tuple[Encoder, dict[str, torch.Tensor]]:
    """Build an :class:`Encoder` from an HF-format directory.

    Returns:
        (encoder in eval mode, head tensors found in the checkpoint with canonical names: pretraining ``cls.*``
        and task ``classifier.*``; may be empty).

    Raises:
        FileNotFoundError: the directory, its ``config.json`` or its weights are missing.
        CheckpointError: the weights are unreadable or do not match the configuration.
        ValueError: the ``model_type`` is not supported.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model directory not found: {model_dir}")
    config = EncoderConfig.from_json_file(model_dir / "config.json")
    weights = find_weights_file(model_dir)
    state = canonical_state_dict(read_state_dict(weights), config.model_type)
    trunk, heads = split_heads(state)
    encoder = Encoder(config)
    if "pooler.dense.weight" not in trunk:
        # Several released checkpoints (e.g. RoBERTa exports) drop the pooler; it is not needed for embeddings.
        logger.info("%s has no pooler weights; the pooler is initialised fresh", weights)
        own = encoder.state_dict()
        trunk.update({k: own[k] for k in ("pooler.dense.weight", "pooler.dense.bias")})
    load_weights_into(encoder, trunk, strict=strict, source=str(weights))
    encoder.eval()
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
