"""Keep the memory a process frees for its own reuse instead of handing it back to the system (glibc's malloc).

PyTorch's CPU tensors come from ``malloc``. glibc serves a large request with a fresh ``mmap`` and unmaps it on
``free``, and returns the top of its heap to the system once more than a threshold of it is free. A training step
frees and re-allocates the same few hundred megabytes of activations and gradients every time, so every step
faults them in again, page by page, each page zeroed by the kernel: on all-MiniLM-L6-v2 about 25,000 page faults
per step, 7-10% of a bf16 step on a 2-core Zen 4. :func:`keep_freed_memory` raises both thresholds
(``mallopt(M_MMAP_THRESHOLD)``, ``mallopt(M_TRIM_THRESHOLD)``) so that freed memory stays in the heap and the next
step reuses it: the faults drop to a few dozen per step.

The cost: the process keeps its peak heap until it exits instead of shrinking between steps. The setting is
process-wide and stays set (the training loop calls it once; ``TrainConfig(keep_freed_memory=False)`` leaves the
allocator alone). Elsewhere than glibc (macOS, Windows, musl) nothing changes and the reason is returned; under an
allocator preloaded in glibc's place (jemalloc, tcmalloc, which reuse memory on their own) the call changes nothing.

Torch-free.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import threading

#: glibc's ``mallopt`` parameter numbers (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Requests up to this size come from the heap and stay there when freed (glibc caps the dynamic threshold at
#: 32 MiB; one activation of a long batch exceeds it).
MMAP_THRESHOLD_BYTES = 1 << 30
#: Free memory at the top of the heap kept rather than returned to the system.
TRIM_THRESHOLD_BYTES = 1 << 31

_lock = threading.Lock()
_done: tuple[bool, str] | None = None


def _glibc_mallopt():
    """glibc's ``mallopt``, or a string saying why there is none to call."""
    name, _ = platform.libc_ver()
    if name != "glibc":
        return f"the C library is not glibc ({name or 'unknown'})"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError) as e:
        return f"glibc's mallopt cannot be called: {e}"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


def keep_freed_memory() -> tuple[bool, str]:
    """Make glibc's malloc keep freed memory for reuse (see the module docstring); once per process.

    Returns:
        (whether the setting is in force, why or why not). Calling again returns the first call's answer.
    """
    global _done
    with _lock:
        if _done is None:
            mallopt = _glibc_mallopt()
            if isinstance(mallopt, str):
                _done = (False, mallopt)
            elif mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1 or mallopt(M_TRIM_THRESHOLD,
                                                                                 TRIM_THRESHOLD_BYTES) != 1:
                _done = (False, "glibc's mallopt refused the thresholds")
            else:
                _done = (True, f"glibc's malloc keeps freed memory (mmap threshold {MMAP_THRESHOLD_BYTES >> 20} MiB, "
                               f"trim threshold {TRIM_THRESHOLD_BYTES >> 20} MiB)")
        return _done
