"""The faster ways to run an encoder: int8 dynamic quantization of its Linear layers, and ONNX Runtime (fp32 or
int8). :func:`load_backend` gives the backend of any path in :data:`ctxemb.core.precision.INFERENCE_PRECISIONS`; the accuracy
bound of each path is in :mod:`ctxemb.runtime.engine`.

**int8** (:func:`ctxemb.runtime.int8.quantize_int8`, scheme and fusion described there): a copy of the encoder whose
Linear layers run in int8 with int8 weights per output channel, activations with one scale and zero point per token,
int32 sums, and a fixed set of outlier input features per Linear in float32, found once per model on calibration text
(:func:`int8_calibration`, cached). Per-token scales are for all-mpnet-base-v2, whose feed-forward outputs carry
activation outliers on a few tokens: with one activation scale per batch (torch's ``quantize_dynamic``, ONNX
Runtime's dynamic quantization) every other token of the batch loses its resolution (mean per-word cosine to fp32
0.87, some words near 0); one scale per token lifts the mean to 0.995 but a token with a massive activation (a
mid-sentence "." in 10,741 WikiText-2 words) still collapses, since its own scale leaves its other features nothing;
taking the outlier features out fixes that. Per-token scales and a fixed outlier set make a text's int8 vectors
independent of the rest of its batch. Speed and accuracy per model: ``benchmarks/encode_throughput.py``; design:
``docs/design/int8.md``.

**ONNX Runtime** (:func:`onnx_model_path`, :class:`OnnxBackend`): the encoder is exported with
``torch.onnx.export`` (the torch.export-based exporter) to a graph ``(input_ids, attention_mask) -> hidden_state_0
.. hidden_state_L`` (every hidden state; 0 is the embedding output) with dynamic batch and length; "onnx-int8"
quantizes that export with ``onnxruntime.quantization.quantize_dynamic`` (int8 weights per output channel,
full-range activations). Both files are cached under ``$CTXEMB_CACHE/onnx/`` (see
:func:`ctxemb.models.hub.cache_dir`), keyed by the model (a fingerprint of its configuration and weights) and the
ctxemb and torch versions; they are written atomically, so concurrent processes at worst export twice. ONNX Runtime
is the optional extra ``onnx`` (``pip install 'ctxemb[onnx]'``).

Both run on the CPU only.

Shapes: B batch, T tokens, n requested layers, H hidden size, L layers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import warnings
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from ctxemb.core.validation import check_choice, read_json_file
from ctxemb._version import __version__
from ctxemb.runtime.engine import EncoderBackend, TorchBackend
from ctxemb.core.precision import INFERENCE_PRECISIONS as PRECISIONS
from ctxemb.modeling.encoder import Encoder
from ctxemb.core.atomic import atomic_path, atomic_write
from ctxemb.runtime.int8_calibration import (CALIBRATION_SENTENCES, CALIBRATION_VERSION, DEFAULT_MAX_OUTLIER_FRACTION,
                                     DEFAULT_OUTLIER_THRESHOLD, Int8Calibration, calibrate_outliers)
from ctxemb.runtime.int8 import packed_hidden_states, quantize_int8, weight_levels
from ctxemb.models.hub import cache_dir
from ctxemb.models.tokenization import Tokenizer

logger = logging.getLogger(__name__)

ONNX_EXTRA_HINT = "pip install 'ctxemb[onnx]' (or: pip install onnxruntime onnx onnxscript)"
# Bumped whenever the exported graph changes (inputs, outputs, export options), so stale cached exports are not used.
_EXPORT_FORMAT = 1


def load_backend(encoder: Encoder, precision: str, *, model_name: str | None = None,
                 fingerprint: str | None = None, tokenizer: Tokenizer | None = None) -> EncoderBackend:
    """The backend that runs ``encoder`` on the path ``precision``.

    Args:
        encoder: a loaded encoder (CPU for "int8" and the ONNX paths).
        precision: one of :data:`ctxemb.core.precision.INFERENCE_PRECISIONS`.
        model_name: a readable name for the ONNX and calibration cache files (default: the model type).
        fingerprint: :func:`encoder_fingerprint` of ``encoder`` if already known (it reads every weight).
        tokenizer: the model's tokenizer; "int8" needs it to calibrate its outlier features once per model
            (:func:`int8_calibration`).

    Raises:
        ValueError: an unknown precision, a CPU-only path for an encoder on another device, or "int8" without a
            tokenizer.
        ImportError: an ONNX path without onnxruntime (the message names the extra to install).
    """
    if not isinstance(encoder, Encoder):
        raise TypeError(f"encoder must be a ctxemb Encoder, got {type(encoder).__name__}")
    check_choice(precision, "precision", PRECISIONS)
    if precision in ("fp32", "bf16"):
        return TorchBackend(encoder, precision)
    device = next(encoder.parameters()).device
    if device.type != "cpu":
        raise ValueError(f"precision {precision!r} runs on the CPU only; the encoder is on {device}. Use 'fp32' or "
                         "'bf16' there")
    if precision == "int8":
        if tokenizer is None:
            raise ValueError("precision 'int8' needs the model's tokenizer (tokenizer=...): its outlier features are "
                             "calibrated once per model on a fixed text")
        calibration = int8_calibration(encoder, tokenizer, model_name=model_name, fingerprint=fingerprint)
        return Int8Backend(quantize_int8(encoder, calibration))
    path = onnx_model_path(encoder, quantized=precision == "onnx-int8", model_name=model_name,
                           fingerprint=fingerprint)
    return OnnxBackend(path, precision=precision, num_layers=encoder.num_layers)


class Int8Backend(TorchBackend):
    """An int8 encoder (:func:`quantize_int8`) whose padded batches run on their real tokens alone where the encoder
    allows it (:func:`ctxemb.runtime.int8.packed_hidden_states`): the same states for the real tokens, no work on
    padding (a batch of 32 length-sorted sentences carries ~5% of it, a token-budget batch up to ~13%)."""

    def __init__(self, encoder: nn.Module):
        super().__init__(encoder, "int8")

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      layers: Sequence[int]) -> torch.Tensor:
        with torch.inference_mode():
            packed = packed_hidden_states(self.encoder, input_ids, attention_mask, layers)
        return packed if packed is not None else super().hidden_states(input_ids, attention_mask, layers)


# ---- int8: calibration (cached) ------------------------------------------------------------------------------------
def int8_calibration(encoder: Encoder, tokenizer: Tokenizer, *, model_name: str | None = None,
                     fingerprint: str | None = None, use_cache: bool = True) -> Int8Calibration:
    """The outlier features of ``encoder``'s Linear layers (:func:`ctxemb.runtime.int8_calibration.calibrate_outliers`
    on :data:`ctxemb.runtime.int8_calibration.CALIBRATION_SENTENCES`), found once per model and cached beside the
    auto-precision choices: ``$CTXEMB_CACHE/autoprecision/<model>-int8-calibration-<key>.json`` (written atomically;
    the key covers the calibration version, threshold and fraction, the model fingerprint and the calibration token
    ids).

    Raises:
        TypeError: ``tokenizer`` is not a ctxemb Tokenizer.
    """
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"tokenizer must be a ctxemb Tokenizer, got {type(tokenizer).__name__}")
    items = tokenizer.tokenize_words([s.split() for s in CALIBRATION_SENTENCES])
    ids = [tokenizer.with_specials(it.ids[:tokenizer.max_length - tokenizer.num_special_tokens])[0] for it in items]
    fingerprint = fingerprint or encoder_fingerprint(encoder)
    key = {"calibration": CALIBRATION_VERSION, "threshold": DEFAULT_OUTLIER_THRESHOLD,
           "max_fraction": DEFAULT_MAX_OUTLIER_FRACTION, "model": fingerprint,
           "ids": hashlib.blake2b(json.dumps(ids).encode(), digest_size=8).hexdigest()}
    digest = hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=8).hexdigest()
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model_name).name if model_name else "model").strip("._") or "model"
    path = cache_dir() / "autoprecision" / f"{name}-int8-calibration-{digest}.json"
    if use_cache and path.is_file():
        try:
            data = read_json_file(path, "int8 calibration")
            if data.get("key") == key:
                calibration = Int8Calibration.from_dict(data["calibration"])
                logger.info("int8 calibration of %s from %s: %s", name, path, calibration.summary())
                return calibration
        except (ValueError, KeyError, TypeError) as e:
            logger.warning("ignoring the cached int8 calibration %s (%s); calibrating again", path, e)
    calibration = calibrate_outliers(encoder, ids)
    logger.info("int8 calibration of %s: %s", name, calibration.summary())
    if use_cache:
        try:
            with atomic_write(path) as f:
                json.dump({"key": key, "model_name": model_name, "calibration": calibration.to_dict()}, f, indent=1)
        except OSError as e:  # a read-only cache costs a calibration per process, nothing else
            logger.warning("could not cache the int8 calibration in %s: %s", path, e)
    return calibration


# ---- ONNX export and ONNX Runtime ------------------------------------------------------------------------------
def import_onnxruntime():
    """The ``onnxruntime`` module, or an ImportError that names the extra to install."""
    try:
        import onnxruntime
    except ImportError as e:
        raise ImportError(f"the ONNX Runtime paths ('onnx-fp32', 'onnx-int8') need onnxruntime: {ONNX_EXTRA_HINT}"
                          ) from e
    return onnxruntime


def onnxruntime_version() -> str | None:
    """The installed onnxruntime's version, or None when it cannot be imported."""
    try:
        return import_onnxruntime().__version__
    except ImportError:
        return None


def encoder_fingerprint(encoder: Encoder) -> str:
    """A 32-hex-digit hash of the encoder's configuration and every weight (names, dtypes, shapes and bytes)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps(encoder.config.to_dict(), sort_keys=True, default=str).encode())
    for name, t in encoder.state_dict().items():
        t = t.detach().to("cpu").contiguous().reshape(-1)
        h.update(f"{name}:{t.dtype}:{t.numel()};".encode())
        h.update(t.view(torch.uint8).numpy())
    return h.hexdigest()


def onnx_cache_folder(encoder: Encoder, fingerprint: str | None = None) -> Path:
    """Where the ONNX exports of ``encoder`` are cached: ``$CTXEMB_CACHE/onnx/<fingerprint>/
    ctxemb-<version>_torch-<version>_format-<n>/`` (the fingerprint is the model: the same weights under two names
    share one export; ``model.json`` there says which model it was)."""
    fingerprint = fingerprint or encoder_fingerprint(encoder)
    versions = f"ctxemb-{__version__}_torch-{torch.__version__}_format-{_EXPORT_FORMAT}"
    versions = re.sub(r"[^A-Za-z0-9._-]+", "_", versions)
    return cache_dir() / "onnx" / fingerprint[:16] / versions


def onnx_model_path(encoder: Encoder, *, quantized: bool = False, model_name: str | None = None,
                    fingerprint: str | None = None) -> Path:
    """The cached ONNX export of ``encoder`` (``model.onnx``) or its int8 quantization (``model.int8.onnx``),
    exported now if missing.

    Args:
        encoder: the encoder (on the CPU).
        quantized: the int8 file (made from the fp32 one, which is exported first if needed).
        model_name: recorded in ``model.json`` beside the export, and logged.
        fingerprint: :func:`encoder_fingerprint` of ``encoder`` if already known.

    Raises:
        ImportError: onnxruntime (or the exporter's onnx/onnxscript) is missing; the message names the extra.
    """
    import_onnxruntime()
    fingerprint = fingerprint or encoder_fingerprint(encoder)
    folder = onnx_cache_folder(encoder, fingerprint)
    fp32 = folder / "model.onnx"
    if not fp32.is_file():
        logger.info("exporting %s to ONNX at %s (once; cached)", model_name or encoder.config.model_type, fp32)
        with atomic_path(fp32) as tmp:
            export_onnx(encoder, tmp)
        with atomic_write(folder / "model.json") as f:
            json.dump({"model": model_name, "model_type": encoder.config.model_type, "fingerprint": fingerprint,
                       "ctxemb": __version__, "torch": torch.__version__, "format": _EXPORT_FORMAT}, f, indent=1)
    if not quantized:
        return fp32
    reduce_range = weight_levels() < 127  # the CPU's int8 products saturate with 8-bit weights (weight_levels)
    int8 = folder / ("model.int8-7bit.onnx" if reduce_range else "model.int8.onnx")
    if not int8.is_file():
        logger.info("quantizing the ONNX export to int8 at %s (once; cached)", int8)
        with atomic_path(int8) as tmp:
            quantize_onnx_int8(fp32, tmp, reduce_range=reduce_range)
    return int8


class _AllHiddenStates(nn.Module):
    """The encoder as a function of tensors only: (input_ids, attention_mask) -> its L + 1 hidden states."""

    def __init__(self, encoder: Encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.encoder(input_ids, attention_mask, compute_pooler=False).hidden_states)


def export_onnx(encoder: Encoder, path: str | Path) -> Path:
    """Export ``encoder`` to one ONNX file at ``path``: inputs ``input_ids`` and ``attention_mask`` (B, T) int64,
    outputs ``hidden_state_0`` .. ``hidden_state_L`` (B, T, H) float32, B and T dynamic.

    Raises:
        ImportError: the exporter's packages (onnx, onnxscript) are missing; the message names the extra.
    """
    try:
        import onnx  # noqa: F401  (the exporter needs both)
        import onnxscript  # noqa: F401
    except ImportError as e:
        raise ImportError(f"exporting to ONNX needs onnx and onnxscript: {ONNX_EXTRA_HINT}") from e
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg = encoder.config
    L = encoder.num_layers
    # An example batch with padding; the exporter specialises dimensions of size 0 or 1, so B = 2 and T = 8.
    token = (cfg.pad_token_id + 1) % cfg.vocab_size
    ids = torch.full((2, 8), token, dtype=torch.long)
    mask = torch.ones_like(ids)
    ids[1, 5:], mask[1, 5:] = cfg.pad_token_id, 0
    batch = torch.export.Dim("batch")
    tokens = torch.export.Dim("tokens", max=cfg.max_tokens)
    was_training = encoder.training
    encoder.eval()
    try:
        # The math attention kernel: with the fused CPU kernel, torch.export records output strides that its own
        # decomposition pass then contradicts ("Cannot view a tensor with shape ..."); the graph is the same.
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), _quiet_exporter():
            program = torch.onnx.export(
                _AllHiddenStates(encoder).eval(), (ids, mask), dynamo=True, verbose=False,
                input_names=["input_ids", "attention_mask"],
                output_names=[f"hidden_state_{i}" for i in range(L + 1)],
                dynamic_shapes=({0: batch, 1: tokens}, {0: batch, 1: tokens}))
            program.save(str(path), external_data=False)
    finally:
        encoder.train(was_training)
    return Path(path)


def quantize_onnx_int8(source: str | Path, target: str | Path, *, reduce_range: bool = False) -> Path:
    """ONNX Runtime's dynamic int8 quantization of an exported model's weight matrix products: int8 weights per
    output channel, activations quantized per batch over the full 8-bit range; ``reduce_range``: 7-bit weights, which
    ONNX Runtime's documentation advises on x86 CPUs without VNNI, whose u8 x s8 instruction saturates."""
    import_onnxruntime()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet_exporter():
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True,
                         reduce_range=reduce_range)
    return Path(target)


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence the exporter's and quantizer's chatter (their warnings about optional packages and pre-processing,
    sent to Python warnings and to the root logger), which says nothing about this export."""
    class _Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return record.levelno >= logging.ERROR

    drop = _Drop()
    root = logging.getLogger()  # onnxruntime.quantization warns through logging.warning
    root.addFilter(drop)
    # Records of child loggers ("onnx_ir.passes...") are not seen by a parent's filters, but levels are inherited.
    named = [logging.getLogger(n) for n in ("torch.onnx", "onnx_ir", "onnxscript")]
    levels = [lg.level for lg in named]
    for lg in named:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.removeFilter(drop)
        for lg, level in zip(named, levels):
            lg.setLevel(level)


class OnnxBackend:
    """An ONNX Runtime session over an export from :func:`export_onnx` (CPU, ``torch.get_num_threads()`` threads).

    Args:
        path: the ``.onnx`` file.
        precision: "onnx-fp32" or "onnx-int8" (recorded, not checked against the file).
        num_layers: L of the exported encoder.
    """

    def __init__(self, path: str | Path, *, precision: str = "onnx-fp32", num_layers: int):
        if precision not in ("onnx-fp32", "onnx-int8"):
            raise ValueError(f"an OnnxBackend runs 'onnx-fp32' or 'onnx-int8', got {precision!r}")
        ort = import_onnxruntime()
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.path = Path(path)
        self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        self.precision = precision
        self.device = torch.device("cpu")
        self.num_layers = num_layers
        outputs = [o.name for o in self.session.get_outputs()]
        expected = [f"hidden_state_{i}" for i in range(num_layers + 1)]
        if outputs != expected:
            raise ValueError(f"{self.path} is not an export of a {num_layers}-layer encoder by ctxemb: its outputs are "
                             f"{outputs}, expected {expected}; delete it to export again")

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      layers: Sequence[int]) -> torch.Tensor:
        feeds = {"input_ids": input_ids.to(torch.long).numpy(), "attention_mask": attention_mask.to(torch.long).numpy()}
        # Asking only for the requested outputs saves copying the others out of the session.
        outs = self.session.run([f"hidden_state_{i}" for i in layers], feeds)
        return torch.from_numpy(np.stack(outs, axis=2))  # (B, T, n, H)
