"""ctxemb.core.allocator: glibc keeps freed memory, so a loop that frees and re-allocates stops faulting pages in."""

import platform
import subprocess
import sys

import pytest

from ctxemb.core import allocator

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's")

# Allocate, fill and free 48 MiB nineteen times (torch's allocation: plain malloc, no huge pages); print the minor
# page faults of the last nine rounds.
LOOP = """
import resource, sys
import torch
from ctxemb.core.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()[0]
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):  # where the chunk lands among the interpreter's own allocations settles in a few rounds
    x = torch.ones(12 << 20)
    del x
before = faults()
for _ in range(9):
    x = torch.ones(12 << 20)
    del x
print(faults() - before)
"""


def _faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", LOOP, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@glibc
def test_kept_memory_is_reused_instead_of_faulted_in_again():
    plain, kept = _faults("plain"), _faults("keep")
    pages = 9 * (48 << 20) // 4096
    assert plain > pages // 2  # every round maps fresh pages (the setting is what changes it)
    assert kept < pages // 5  # at most one round of nine faults its pages in


@glibc
def test_the_setting_is_made_once_and_says_so():
    first = allocator.keep_freed_memory()
    assert first[0] and "keeps freed memory" in first[1]
    assert allocator.keep_freed_memory() is first


def test_elsewhere_than_glibc_nothing_changes_and_the_reason_is_given(monkeypatch):
    monkeypatch.setattr(allocator, "_done", None)
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("", ""))
    assert allocator.keep_freed_memory() == (False, "the C library is not glibc (unknown)")
