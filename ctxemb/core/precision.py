"""The one precision vocabulary: the names, their validation, what ``"auto"`` resolves to (and why), the CPU facts
that decide it, the bf16 autocast and its one warning. Inference and training both read it.

Two sets, because the two halves run different things:

=====================  ===============================================  ====================================================
set                    names                                            ``"auto"`` resolves to
=====================  ===============================================  ====================================================
inference              ``fp32`` ``bf16`` ``int8`` ``onnx-fp32``         the fastest path whose word vectors stay within its
(:data:`INFERENCE_`    ``onnx-int8`` (+ ``auto``)                       accuracy bound on a probe, measured on this machine
``PRECISIONS``)                                                         (:func:`ctxemb.runtime.autoprecision.choose_precision`;
                                                                        the Embedder records the path and the reason)
training               ``fp32`` ``bf16`` (+ ``auto``)                   ``bf16`` where bfloat16 products run in hardware
(:data:`TRAINING_`                                                      (a CPU with AVX512-BF16 or AMX-BF16, a CUDA GPU
``PRECISIONS``)                                                         with bf16), else ``fp32``
                                                                        (:func:`resolve_training_precision`)
=====================  ===============================================  ====================================================

Training cannot use int8 or ONNX (no backward pass), and its ``auto`` needs no probe: autocast to bf16 keeps
LayerNorm, softmax and the optimizer's state in float32, so the only question is speed, which the hardware answers.
On a CPU that emulates bf16 it is several times slower than fp32 (all-MiniLM-L6-v2 ran 7x slower on a 2-core AVX2
EPYC), which is why ``auto`` keeps fp32 there and an explicit ``bf16`` is warned about (:func:`warn_emulated_bf16`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from ctxemb.core.machine import describe_machine
from ctxemb.core.validation import check_choice

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

InferencePrecision = Literal["fp32", "bf16", "int8", "onnx-fp32", "onnx-int8"]
#: The inference paths :func:`ctxemb.runtime.engine.run_encoder` can run (the last three with a backend from
#: :func:`ctxemb.runtime.backends.load_backend`).
INFERENCE_PRECISIONS: tuple[str, ...] = get_args(InferencePrecision)
#: What an :class:`~ctxemb.embedding.embedder.EmbedderConfig` accepts: a path, or "auto" (the fastest path within its bound on
#: the machine at hand; the Embedder records the path it chose).
INFERENCE_PRECISION_CHOICES: tuple[str, ...] = INFERENCE_PRECISIONS + ("auto",)
#: Least mean per-word cosine to the exact (fp32) vectors an inference path must reach on the probe before
#: ``precision="auto"`` may choose it (see :mod:`ctxemb.runtime.engine`).
ACCURACY_BOUNDS: dict[str, float] = {"fp32": 1.0, "bf16": 0.999, "int8": 0.99, "onnx-fp32": 0.9999, "onnx-int8": 0.99}

TrainingPrecision = Literal["auto", "fp32", "bf16"]
#: What :class:`~ctxemb.training.config.TrainConfig` accepts.
TRAINING_PRECISIONS: tuple[str, ...] = get_args(TrainingPrecision)


def check_inference_precision(precision: str, *, allow_auto: bool = True, name: str = "precision") -> str:
    """``precision`` if it names an inference path (or ``"auto"`` with ``allow_auto``).

    Raises:
        ValueError: another name (the message lists the accepted ones).
    """
    return check_choice(precision, name, INFERENCE_PRECISION_CHOICES if allow_auto else INFERENCE_PRECISIONS)


def check_training_precision(precision: str, *, name: str = "precision") -> str:
    """``precision`` if it is a training precision (``auto``, ``fp32``, ``bf16``).

    Raises:
        ValueError: another name, e.g. an inference-only path such as ``int8``.
    """
    return check_choice(precision, name, TRAINING_PRECISIONS)


# ---- the machine -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CpuInfo:
    """The CPU as ``/proc/cpuinfo`` describes it (Linux); ``name`` falls back to :func:`platform.processor`."""

    name: str
    flags: frozenset[str]


@functools.lru_cache(maxsize=None)
def cpu_info() -> CpuInfo:
    """This machine's CPU model name and instruction-set flags (no flags where ``/proc/cpuinfo`` is missing), as
    :func:`ctxemb.core.machine.describe_machine` describes them."""
    machine = describe_machine()
    return CpuInfo(machine.cpu, machine.flags)


@functools.lru_cache(maxsize=None)
def cpu_has_native_bf16() -> bool | None:
    """Whether this CPU multiplies bfloat16 matrices in hardware (AVX512-BF16 or AMX-BF16); None if unknown.

    Read from ``/proc/cpuinfo`` (Linux only).
    """
    flags = cpu_info().flags
    if not flags:
        return None
    return bool({"avx512_bf16", "amx_bf16"} & flags)


def native_bf16(device: torch.device) -> tuple[bool, str]:
    """Whether ``device`` runs bfloat16 matrix products in hardware, and the fact that says so (for logs and run
    records)."""
    if device.type == "cuda":
        import torch

        ok = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return ok, "the CUDA device supports bf16" if ok else "the CUDA device does not support bf16"
    if device.type == "cpu":
        has = cpu_has_native_bf16()
        if has is None:
            return False, "the CPU's instruction-set flags are unknown (no /proc/cpuinfo)"
        return has, ("the CPU has AVX512-BF16/AMX-BF16" if has else
                     "the CPU has no AVX512-BF16/AMX-BF16 (bf16 would be emulated, several times slower than fp32)")
    return False, f"no hardware bf16 is known for device type {device.type!r}"


# ---- training: what "auto" becomes -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResolvedPrecision:
    """A training precision as requested, what it resolved to on this device, and why."""

    requested: str
    resolved: Literal["fp32", "bf16"]
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"requested": self.requested, "resolved": self.resolved, "reason": self.reason}


def explain_training_precision(precision: str, device: torch.device | str) -> ResolvedPrecision:
    """What a training ``precision`` runs as on ``device``, and why: ``"auto"`` -> ``"bf16"`` where bfloat16
    products run in hardware, else ``"fp32"``; an explicit choice is kept (an emulated ``"bf16"`` is warned about
    once).

    Raises:
        ValueError: not a training precision.
    """
    import torch  # imported here: the choices above are read by `ctxemb --help`, which loads no torch

    check_training_precision(precision)
    device = torch.device(device)
    native, fact = native_bf16(device)
    if precision == "auto":
        return ResolvedPrecision("auto", "bf16" if native else "fp32", f"auto: {fact}")
    if precision == "bf16" and not native:
        warn_emulated_bf16(device.type)
    return ResolvedPrecision(precision, precision, "requested")  # type: ignore[arg-type]


def resolve_training_precision(precision: str, device: torch.device | str) -> Literal["fp32", "bf16"]:
    """:func:`explain_training_precision` without the reason."""
    return explain_training_precision(precision, device).resolved


# ---- running it --------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def warn_emulated_bf16(device_type: str) -> None:
    """The one warning for bf16 on hardware that emulates it (logged once per device type and process)."""
    logger.warning("precision='bf16' on a %s without hardware bfloat16 (AVX512-BF16/AMX on CPUs): it is emulated "
                   "and usually several times slower than fp32; use precision='auto' or 'fp32'", device_type)


def bf16_autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast to bfloat16 for a resolved ``"bf16"`` (matrix products in bf16, LayerNorm and softmax in float32);
    a no-op context for every other precision (their modules run as they are)."""
    if precision == "bf16":
        import torch

        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
