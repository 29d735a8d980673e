"""The training precisions (fp32, bf16 autocast, and "auto") and what "auto" resolves to on this machine.

Inference precisions (fp32/bf16/int8/ONNX) are the Embedder's, in :mod:`ctxemb.autoprecision`; training has only
these three, and the run record stores what "auto" resolved to (:func:`resolve_precision`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Literal, get_args

import torch

from ctxemb._validation import check_choice
from ctxemb.inference import cpu_has_native_bf16

logger = logging.getLogger(__name__)

Precision = Literal["auto", "fp32", "bf16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)


def resolve_precision(precision: str, device: torch.device) -> Literal["fp32", "bf16"]:
    """"auto" -> "bf16" where bfloat16 matrix products run in hardware (a CUDA GPU that supports bf16, or a CPU
    with AVX512-BF16/AMX), else "fp32". An explicit "bf16" on a CPU without it is kept, with a warning.

    Raises:
        ValueError: an unknown precision.
    """
    check_choice(precision, "precision", PRECISIONS)
    if device.type == "cuda":
        native = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    elif device.type == "cpu":
        native = cpu_has_native_bf16() is True
    else:
        native = False
    if precision == "auto":
        return "bf16" if native else "fp32"
    if precision == "bf16" and not native:
        _warn_emulated_bf16(device.type)
    return precision  # type: ignore[return-value]


@functools.lru_cache(maxsize=None)
def _warn_emulated_bf16(device_type: str) -> None:
    logger.warning("precision='bf16' on a %s without hardware bfloat16 (AVX512-BF16/AMX on CPUs): it is emulated "
                   "and usually several times slower than fp32; use precision='auto' or 'fp32'", device_type)


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast for a resolved ``"bf16"``, else a no-op context."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
