"""Native CPU kernels, compiled from their C++ source on first use and cached.

Two libraries. The first, ``torch.ops.ctxemb_int8``, for CPUs with AVX512-VNNI, holds the kernels of the int8 path
(:mod:`ctxemb.runtime.int8`, whose scheme they implement):

- the int8 Linear (``int8_vnni.cpp``): per-token quantization of the activations to uint8, and a u8 x s8 product
  (``vpdpbusd``) whose dequantization, bias, outlier features and activation (or residual add and LayerNorm) are
  applied to each output tile while it is still in registers, instead of in separate passes over the (M, N) output;
  its output can also leave the kernel quantized for the next Linear. The integer sums are the same, exact ones as
  ``torch._int_mm``'s;
- self-attention (``attention.cpp``): every head's ``softmax(q k^T / sqrt(D) + mask) v`` read straight from the
  Q/K/V product's output, the softmax between the two products, the result in float32 or quantized for the attention
  output Linear. Its products run in float32, or in bfloat16 with float32 sums where the CPU has AVX512-BF16
  (:func:`attention_bf16_cpu`; the caller decides per call);
- unpadded batches (``packing.cpp``): the kept layers' states of a batch's packed real tokens written into its padded
  result;
- what they share (``common.h``): the per-token quantization of a row, and exp.

The second, ``torch.ops.ctxemb_train`` (``train_ops.cpp``, :func:`train_ops`), for CPUs with AVX-512 (F, BW, VL, DQ;
no VNNI), holds the fused ops of the training step that :mod:`ctxemb.modeling.fused_training` wraps in autograd
Functions: dropout + residual add + LayerNorm, LayerNorm + dropout, and the attention probabilities' softmax +
dropout, with counter-based dropout masks. It is built and loaded as the first one is, in a directory of its own
(``ctxemb_train_ops_<key>``), so neither rebuilds the other. :func:`train_ops_available` says whether it runs here;
:func:`enable_fused_training` loads it and gives it to a model's BERT-layout modules
(:func:`ctxemb.modeling.fused_training.set_fused_training`: the modeling layer takes the ops as an argument, and
never imports this one).

The build (``torch.utils.cpp_extension``, about 30 s; needs a C++ compiler and ninja) goes to
``$CTXEMB_CACHE/kernels/ctxemb_int8_vnni_<key>``, keyed by the sources, the compiler flags and the torch version (so
a new version builds beside an old one instead of over it). The library is compiled for AVX-512 and is only loaded on
a CPU whose ``/proc/cpuinfo`` flags say it has those instructions (a CPU without them would fault); its bfloat16
functions carry their own target attribute and only run where the caller has checked the CPU's flags.

Concurrent processes build it once: each loads it holding the build directory's lock (:func:`build_lock`, an
``flock`` on ``<build directory>/.ctxemb.lock``, which the system releases when its holder dies in any way, SIGKILL
included). A process that finds another one building logs a warning naming the lock file and that process, and waits
up to :data:`BUILD_WAIT` seconds (past that, the int8 path runs without the kernel, and its warning names the lock
file and the process). torch's own lock (the file ``lock`` in the build directory, which torch waits for
without end) outlives a build that was killed; under the build lock such a file can only be such a leftover, and is
deleted.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from ctxemb.core.locks import DirectoryLock, DirectoryLockedError, lock_file_inside
from ctxemb.core.precision import cpu_info
from ctxemb.modeling.fused_training import fused_training_modules, set_fused_training
from ctxemb.models.hub import cache_dir

logger = logging.getLogger(__name__)

#: Seconds a process waits for another process's build of a kernel (about 30 s, minutes on a busy machine) before
#: giving up: the int8 path then runs without the kernel, and the warning names the lock file.
BUILD_WAIT = 900.0
#: torch.utils.cpp_extension's lock in a build directory (its ``FileBaton``): created by a build, deleted after it.
TORCH_BUILD_LOCK = "lock"

#: What the int8 kernel is compiled for; each must be among the CPU's flags.
INT8_VNNI_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "fma")
_COMPILE_FLAGS = ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni", "-mfma",
                  # ATen's vectorized math (erf, tanh of the fused GELU) in its AVX-512 form
                  "-DCPU_CAPABILITY_AVX512", "-DCPU_CAPABILITY=AVX512", "-fopenmp"]
_SOURCES = tuple(Path(__file__).with_name(name) for name in ("int8_vnni.cpp", "attention.cpp", "packing.cpp"))
#: What the sources include (part of the build key).
_HEADERS = tuple(Path(__file__).with_name(name) for name in ("common.h",))
#: What the attention kernel's bfloat16 products need among the CPU's flags.
ATTENTION_BF16_FLAGS = ("avx512_bf16",)
#: What the training ops are compiled for; each must be among the CPU's flags.
TRAIN_OPS_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "fma")
_TRAIN_COMPILE_FLAGS = ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-fopenmp"]
_TRAIN_SOURCES = (Path(__file__).with_name("train_ops.cpp"),)


def int8_vnni_cpu() -> tuple[bool, str]:
    """Whether this CPU can run the int8 VNNI kernel, and why not if it cannot. Limits set for torch's own kernels
    count too: ``ATEN_CPU_CAPABILITY`` below avx512, or ``ONEDNN_MAX_CPU_ISA`` below AVX-512 (how
    ``scripts/test_avx2.sh`` runs this machine as an AVX2-only one) keep it off."""
    why_not = _avx512_missing(INT8_VNNI_FLAGS)
    return (False, why_not) if why_not else (True, "the CPU has AVX512-VNNI")


def train_ops_cpu() -> tuple[bool, str]:
    """Whether this CPU can run the training ops (:func:`train_ops`: AVX-512 F, BW, VL and DQ), and why not if it
    cannot; the limits set for torch's own kernels count as for :func:`int8_vnni_cpu`."""
    why_not = _avx512_missing(TRAIN_OPS_FLAGS)
    return (False, why_not) if why_not else (True, "the CPU has AVX-512")


def _avx512_missing(required: tuple[str, ...]) -> str | None:
    """Why an AVX-512 library needing the CPU flags ``required`` cannot run here, or None if it can."""
    aten = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if aten and not aten.startswith("avx512"):
        return f"ATEN_CPU_CAPABILITY={aten} limits torch to instructions below AVX-512"
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    if onednn and onednn != "ALL" and not onednn.startswith(("AVX512", "AVX10")) and "AMX" not in onednn:
        return f"ONEDNN_MAX_CPU_ISA={onednn} limits oneDNN to instructions below AVX-512"
    flags = cpu_info().flags
    if not flags:
        return "the CPU's instruction-set flags are unknown (no /proc/cpuinfo)"
    missing = [f for f in required if f not in flags]
    if missing:
        return f"the CPU lacks {', '.join(missing)}"
    return None


def attention_bf16_cpu() -> tuple[bool, str]:
    """Whether this CPU multiplies bfloat16 natively for the attention kernel (AVX512-BF16 among its flags, and the
    int8 kernel's own instructions: :func:`int8_vnni_cpu`), and why not if it does not."""
    ok, why = int8_vnni_cpu()
    if not ok:
        return False, why
    missing = [f for f in ATTENTION_BF16_FLAGS if f not in cpu_info().flags]
    if missing:
        return False, f"the CPU lacks {', '.join(missing)}"
    return True, "the CPU has AVX512-BF16"


def int8_vnni_build_dir() -> Path:
    """The kernels' build directory, ``$CTXEMB_CACHE/kernels/ctxemb_int8_vnni_<key>``: one per sources, flags and
    torch version, so a process never rebuilds (overwrites) a library another process, running another version of
    ctxemb, has loaded."""
    return _build_dir("ctxemb_int8_vnni", (*_SOURCES, *_HEADERS), _COMPILE_FLAGS)


def train_ops_build_dir() -> Path:
    """The training ops' build directory, ``$CTXEMB_CACHE/kernels/ctxemb_train_ops_<key>``, keyed as
    :func:`int8_vnni_build_dir` is."""
    return _build_dir("ctxemb_train_ops", (*_TRAIN_SOURCES, *_HEADERS), _TRAIN_COMPILE_FLAGS)


def _build_dir(prefix: str, files: tuple[Path, ...], flags: list[str]) -> Path:
    texts = [p.read_text(encoding="utf-8") for p in files]
    key = hashlib.sha256("\n".join([*texts, *flags, torch.__version__]).encode()).hexdigest()[:16]
    return cache_dir() / "kernels" / f"{prefix}_{key}"


def _build_and_load(build: Path, sources: tuple[Path, ...], flags: list[str], what: str) -> None:
    from torch.utils.cpp_extension import load

    build.mkdir(parents=True, exist_ok=True)
    with build_lock(build, what):
        load(name=build.name, sources=[str(p) for p in sources], extra_cflags=flags, extra_ldflags=["-fopenmp"],
             build_directory=str(build), is_python_module=False, verbose=False)


def _load_int8_vnni():
    _build_and_load(int8_vnni_build_dir(), _SOURCES, _COMPILE_FLAGS, "the build of the int8 VNNI kernel")
    return torch.ops.ctxemb_int8


def _load_train_ops():
    _build_and_load(train_ops_build_dir(), _TRAIN_SOURCES, _TRAIN_COMPILE_FLAGS, "the build of the training ops")
    return torch.ops.ctxemb_train


@contextlib.contextmanager
def build_lock(build: Path, what: str) -> Iterator[None]:
    """Hold the lock of the kernel build directory ``build`` while the block builds or loads the kernel.

    The lock is an ``flock`` on ``build/.ctxemb.lock`` that records its holder's process id: the system releases it
    when the holder dies, however it dies, so a killed build never blocks later ones. While another live process
    holds it, a warning names the lock file and that process, and the wait lasts up to :data:`BUILD_WAIT` seconds.
    Once it is held, torch's own lock in ``build`` (:data:`TORCH_BUILD_LOCK`, which torch would wait for without end)
    can only be the leftover of a build that was killed, since every build runs under this lock: it is deleted.

    Args:
        build: the build directory (it exists). what: what is built, for messages.

    Raises:
        TimeoutError: another process held the lock for :data:`BUILD_WAIT` seconds; the message names the lock file
            and the process.
    """
    lock = DirectoryLock(lock_file_inside(build), what=f"{what} in {build}", record_holder=True)
    try:
        lock.acquire(timeout=0)
    except DirectoryLockedError:
        pid = lock.holder_pid()
        holder = f"process {pid}" if pid is not None else "another process"
        logger.warning("waiting for %s by %s to finish (lock file %s; giving up after %g s)", what, holder,
                       lock.lock_file, BUILD_WAIT)
        try:
            lock.acquire(timeout=BUILD_WAIT)
        except DirectoryLockedError:
            raise TimeoutError(
                f"gave up waiting {BUILD_WAIT:g} s for {what} by {holder} (lock file {lock.lock_file}): if that "
                "process is stuck, end it; the lock is released when its holder ends") from None
    try:
        baton = build / TORCH_BUILD_LOCK
        if os.path.lexists(baton):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(baton)
            logger.warning("deleted torch's build lock %s, left by a build that was killed (torch would wait for it "
                           "without end)", baton)
        yield
    finally:
        lock.release()


@functools.lru_cache(maxsize=1)
def int8_vnni_ops():
    """The native kernels' ops (``torch.ops.ctxemb_int8``: ``pack_weights``, ``quantize_rows``, ``linear``,
    ``linear_quantized``, ``attention``, ``attention_quantized``), built on first use; None where this CPU lacks the
    instructions or the build fails (logged once, with the reason)."""
    return _checked_library("int8 VNNI kernel", int8_vnni_cpu, _load_int8_vnni, _check,
                            "the int8 path uses torch._int_mm instead")


def _checked_library(what: str, cpu, load, check, instead: str):
    """``load()``'s ops after ``check(ops)``, or None where ``cpu()`` says this CPU cannot run them (logged at the
    information level) or building, loading or checking them fails (a warning naming the error and ``instead``)."""
    ok, why = cpu()
    if not ok:
        logger.info("%s not used: %s", what, why)
        return None
    try:
        ops = load()
        check(ops)
        return ops
    except Exception as e:  # noqa: BLE001  (any failure to build or load means: not here; the caller falls back)
        logger.warning("the %s could not be built or loaded here (%s: %s); %s", what, type(e).__name__,
                       str(e).strip().splitlines()[-1] if str(e) else "", instead)
        return None


def _check(ops) -> None:
    """One product against an int64 product, and one attention (each branch this CPU runs) against float64, so a
    miscompiled kernel is never used (raises if one differs)."""
    gen = torch.Generator().manual_seed(0)
    M, K, N = 13, 72, 80  # a partial micro-tile, a partial panel, K not a multiple of 16
    u = torch.randint(0, 256, (M, K), dtype=torch.uint8, generator=gen)
    w = torch.randint(-127, 128, (N, K), dtype=torch.int8, generator=gen)
    ones, zeros = torch.ones(M), torch.zeros(M, dtype=torch.int32)
    y = ops.linear(u, ones, zeros, ops.pack_weights(w), torch.zeros(N, dtype=torch.int32), torch.ones(N),
                   torch.zeros(N), None, None, 0, None, None, None, 0.0)
    if not torch.equal(y.double(), (u.long() @ w.long().T).double()):
        raise RuntimeError("the int8 VNNI kernel's product differs from an int64 product")
    B, T, N, D = 2, 19, 2, 16  # a partial 16-key vector, a padded sequence
    qkv = torch.randn(B * T, 3 * N * D, generator=gen)
    mask = torch.zeros(B, 1, 1, T)
    mask[1, ..., 7:] = torch.finfo(torch.float32).min
    q, k, v = qkv.double().view(B, T, 3, N, D).permute(2, 0, 3, 1, 4).unbind(0)
    want = torch.softmax(q @ k.transpose(-1, -2) * D ** -0.5 + mask.double(), -1) @ v  # (B, N, T, D)
    want = want.transpose(1, 2).reshape(B * T, N * D)
    for bf16, tolerance in ((False, 1e-4), (True, 0.05))[:1 + attention_bf16_cpu()[0]]:
        if not torch.allclose(ops.attention(qkv, B, N, mask, bf16).double(), want, rtol=0, atol=tolerance):
            raise RuntimeError(f"the attention kernel ({'bf16' if bf16 else 'float32'} products) differs from float64 "
                               "attention")


@functools.lru_cache(maxsize=1)
def train_ops():
    """The training ops (``torch.ops.ctxemb_train``: ``dropout_add_layer_norm``, ``layer_norm_dropout``,
    ``softmax_dropout``, each with its ``_backward``, and ``counter_hash``, ``dropout_keep``), built on first use;
    None where this CPU lacks the instructions or the build fails (logged once, with the reason)."""
    return _checked_library("fused training ops", train_ops_cpu, _load_train_ops, _check_train,
                            "training runs the composed torch ops instead")


def train_ops_available() -> tuple[bool, str]:
    """Whether the training ops (:func:`train_ops`) run here, and why not if they do not (no AVX-512, torch limited
    below it, the build failed). The first call builds them (about a minute; cached in ``$CTXEMB_CACHE/kernels``)."""
    ok, why = train_ops_cpu()
    if not ok:
        return False, why
    if train_ops() is None:
        return False, "the native training ops could not be built or loaded here (the log says why)"
    return True, "the native training ops are loaded (AVX-512)"


def enable_fused_training(model: nn.Module) -> tuple[bool, str]:
    """Switch on the fused training ops of ``model``'s BERT-layout modules with the native ops
    (``set_fused_training(model, train_ops())``) where those run here; elsewhere ``model`` is left as it is.

    The first call builds the ops (about a minute; cached): call it before the first training step, not within one.

    Returns:
        (whether the ops were switched on, why not, or in how many modules they were).
    """
    modules = fused_training_modules(model)
    if not modules:
        return False, f"no module of this {type(model).__name__} runs fused training ops (only BERT-layout encoders do)"
    ok, why = train_ops_available()
    if not ok:
        return False, why
    set_fused_training(model, train_ops())
    return True, f"the native training ops are loaded (AVX-512) and switched on in {len(modules)} modules"


#: Known answers of the training ops' dropout hash (train_ops.cpp): key, first index, the hashes from there.
_KNOWN_HASHES = (-0x0123456789ABCDEF, 4294967280, (3351399886, 2720958138, 3686719281, 3698456198))


def _check_train(ops) -> None:
    """The hash against known answers, and the fused LayerNorm and softmax (at dropout 0, whose masks keep every
    element) against torch's, so a miscompiled library is never used (raises if one differs)."""
    key, start, want = _KNOWN_HASHES
    if tuple(ops.counter_hash(key, start, len(want)).tolist()) != want:
        raise RuntimeError("the training ops' dropout hash differs from its known answers")
    gen = torch.Generator().manual_seed(0)
    M, H = 5, 40  # a partial 16-lane vector
    # every draw from `gen`: the check runs inside a seeded training run (before its first step, or after a resume
    # restored the generator), and a draw from torch's global generator would shift that run's dropout
    x, residual = torch.randn(M, H, generator=gen), torch.randn(M, H, generator=gen)
    w, b = torch.randn(H, generator=gen), torch.randn(H, generator=gen)
    y = ops.dropout_add_layer_norm(x, residual, w, b, 1e-12, 0.0, key, False)[0]
    if not torch.allclose(y, torch.nn.functional.layer_norm(x + residual, (H,), w, b, 1e-12), rtol=0, atol=1e-4):
        raise RuntimeError("the training ops' LayerNorm differs from torch's")
    scores = torch.randn(2, 3, 4, 19, generator=gen)
    probs = ops.softmax_dropout(scores, None, 0.5, 0.0, key)[0]
    if not torch.allclose(probs, torch.softmax(scores * 0.5, -1), rtol=0, atol=1e-6):
        raise RuntimeError("the training ops' softmax differs from torch's")
