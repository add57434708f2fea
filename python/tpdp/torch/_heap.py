# SPDX-License-Identifier: BSD-3-Clause
"""Giving the host memory that torch freed back to the OS during backward.

torch's CPU allocator frees through glibc's malloc. Once a chunk above the
mmap threshold is freed, glibc raises that threshold (up to 32 MiB), so
every later activation, gradient and optimizer state below it lives in the
heap; what backward frees stays there as free chunks, counted in the
process's RSS. Under fully_shard the peak comes at the root unit's
backward (the gathered embedding, its full gradient and torch's
vocabulary-sized temporaries, each a fresh mapping) on top of those free
chunks: about 400 MB of the 124M GPT-2's peak on 2 ranks
(bench/torch_fsdp.sh). Once a backward, after the post-backward of the
last unit to begin its backward before the outer units finish theirs (a
model of one unit: when its backward ends), when the heap holds more than
TPDP_HEAP_TRIM_MIB (default 128; 0 turns it off) of free memory,
malloc_trim gives its pages back; their next use costs a page fault each.
Trimming after every unit did the same to the peak with twice the extra
page faults (about 124,000 a step against 62,000 on that benchmark): each
unit's backward faulted in again what the one before had given back.
glibc 2.33+ only (mallinfo2); elsewhere a no-op.
"""
import ctypes
import os

from .. import _lib as L


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
        "fsmblks", "uordblks", "fordblks", "keepcost")]


def _libc():
    try:
        libc = ctypes.CDLL(None)
        info, trim = libc.mallinfo2, libc.malloc_trim
    except (OSError, AttributeError):
        return None, None
    info.restype, info.argtypes = _MallInfo2, []
    trim.restype, trim.argtypes = ctypes.c_int, [ctypes.c_size_t]
    return info, trim


_INFO, _TRIM = _libc()


def threshold_bytes():
    """TPDP_HEAP_TRIM_MIB in bytes (0: off); a bad value raises."""
    raw = os.environ.get("TPDP_HEAP_TRIM_MIB", "128")
    try:
        mib = int(raw)
        if mib < 0:
            raise ValueError
    except ValueError:
        raise L.TpdpError("TPDP_ERR_INVALID_ARGUMENT",
                          "TPDP_HEAP_TRIM_MIB=%r: a whole number of MiB >= 0 "
                          "expected (0 turns the trim off)" % raw,
                          "tpdp.torch.fully_shard") from None
    return mib << 20


def free_heap_bytes():
    """Bytes in glibc's free chunks (None without mallinfo2)."""
    return None if _INFO is None else _INFO().fordblks


def trim_if_large(threshold):
    """malloc_trim when the heap's free chunks exceed `threshold` bytes
    (> 0); True when it trimmed."""
    if _INFO is None or threshold <= 0 or _INFO().fordblks <= threshold:
        return False
    _TRIM(0)
    return True
