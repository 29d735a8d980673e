"""The machine a measurement or a training run ran on, described once.

:func:`describe_machine` is the one description: the CPU's model name and its instruction-set flags (all of them,
and the ones that decide which kernels and precisions run fast: :data:`CPU_FLAGS`), the cores, torch's threads, a
CUDA device, the operating system, and the versions of Python, torch, numpy and ctxemb. The CPU facts behind
``precision="auto"`` (:func:`ctxemb.core.precision.cpu_info`), the run record of a training run
(:func:`ctxemb.training.recipe.machine_info`) and every benchmark's results file (``benchmarks/harness.py``) read it.

Describing the machine imports nothing heavy: the version of a package that is not imported yet (torch, numpy) comes
from its installed metadata, and torch's threads and CUDA device are read only from a torch already imported (None
otherwise). The CPU is read from ``/proc/cpuinfo`` (Linux) once per process; elsewhere its name falls back to
:func:`platform.processor` and its flags are unknown (empty).
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from ctxemb._version import __version__

#: The CPU flags that decide what runs fast, in the order they are reported: AVX2 and FMA (fp32 kernels), AVX-512
#: and the VNNI int8 dot products (the int8 path), AVX512-BF16 and AMX (bfloat16 and int8 tiles in hardware).
CPU_FLAGS: tuple[str, ...] = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8",
                              "avx_vnni")


@dataclass(frozen=True)
class Machine:
    """One description of the machine (see the module docstring); :meth:`as_dict` is its JSON form."""

    cpu: str  # model name
    flags: frozenset[str]  # every instruction-set flag the CPU reports (empty where unknown)
    cpu_count: int | None
    torch_threads: int | None  # None: torch is not imported
    gpu: str | None  # the first CUDA device's name; None without one (or without torch imported)
    os: str  # platform.platform()
    python: str
    torch: str | None  # None: not installed
    numpy: str | None
    ctxemb: str

    @property
    def cpu_flags(self) -> list[str]:
        """The flags of :data:`CPU_FLAGS` this CPU has, in that order."""
        return [f for f in CPU_FLAGS if f in self.flags]

    def as_dict(self) -> dict[str, Any]:
        """The description as JSON values, with the flags that matter (not every flag)."""
        return {"cpu": self.cpu, "cpu_flags": self.cpu_flags, "cpu_count": self.cpu_count,
                "torch_threads": self.torch_threads, "gpu": self.gpu, "os": self.os, "python": self.python,
                "torch": self.torch, "numpy": self.numpy, "ctxemb": self.ctxemb}


@functools.lru_cache(maxsize=None)
def _cpu() -> tuple[str, frozenset[str]]:
    """The CPU's model name and flags from ``/proc/cpuinfo`` (its first processor), read once."""
    name, flags = None, None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and name is None:
                    name = value.strip()
                elif key == "flags" and flags is None:
                    flags = frozenset(value.split())
                if name is not None and flags is not None:
                    break
    except OSError:
        pass
    return name or platform.processor() or platform.machine(), flags if flags is not None else frozenset()


def _version(package: str) -> str | None:
    """The version of ``package``: the imported module's ``__version__``, else the installed distribution's."""
    module = sys.modules.get(package)
    if module is not None and isinstance(getattr(module, "__version__", None), str):
        return module.__version__
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def describe_machine() -> Machine:
    """This machine as it is now (torch's thread count is read at the call: it can change during a run)."""
    name, flags = _cpu()
    torch = sys.modules.get("torch")
    threads = gpu = None
    if torch is not None:
        threads = torch.get_num_threads()
        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return Machine(cpu=name, flags=flags, cpu_count=os.cpu_count(), torch_threads=threads, gpu=gpu,
                   os=platform.platform(), python=platform.python_version(), torch=_version("torch"),
                   numpy=_version("numpy"), ctxemb=__version__)
