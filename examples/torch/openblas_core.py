# SPDX-License-Identifier: BSD-3-Clause
"""OpenBLAS's widest kernels for this CPU, for torch's matmuls where torch
runs on OpenBLAS (Debian's python3-torch): Python's side of
examples/common/blas_core.c, the same table and the same rule.

OpenBLAS reads OPENBLAS_CORETYPE once, when it loads, and Debian 12's
0.3.21 falls back to its generic SSE3 "Prescott" kernels on CPUs it does
not know (recent Xeons). choose_core(), called before torch is imported,
asks OpenBLAS what it picked; when that is narrower than the CPU's flags
allow, it sets the variable and restarts the script once (before MPI
starts; the variable, set then, stops a second restart). An
OPENBLAS_CORETYPE already set wins. describe() says what runs and why.
"""
import ctypes
import os
import sys

# OpenBLAS's x86-64 core names by the widest vector unit their GEMMs use:
# 3 AVX-512, 2 AVX2, 1 AVX (others: 0).
_LEVEL = {"skylakex": 3, "cooperlake": 3, "sapphirerapids": 3,
          "haswell": 2, "zen": 2, "sandybridge": 1, "bulldozer": 1,
          "piledriver": 1, "steamroller": 1, "excavator": 1}
_VALUE = {1: "SANDYBRIDGE", 2: "HASWELL", 3: "SKYLAKEX"}
_OWN_CHOICE = "EX_OPENBLAS_OWN_CHOICE"  # as blas_core.c: OpenBLAS's pick


def cpu_level(flags):
    """The level a CPU with these /proc/cpuinfo flags supports."""
    f = set(flags)
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= f:
        return 3
    if {"avx2", "fma"} <= f:
        return 2
    return 1 if "avx" in f else 0


def better_core_for(picked, level):
    """The OPENBLAS_CORETYPE giving wider kernels than `picked`, or None."""
    if level <= _LEVEL.get((picked or "").lower(), 0):
        return None
    return _VALUE.get(level)


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return line.split(":", 1)[1].split()
    except OSError:
        pass
    return []


def _openblas():
    """OpenBLAS (the library Debian's torch reaches through libblas.so.3),
    or None where there is none."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_config.restype = ctypes.c_char_p
        return lib
    except (OSError, AttributeError):
        return None


def choose_core():
    """Restart the script once with OPENBLAS_CORETYPE where OpenBLAS picked
    narrower kernels than the CPU has; returns when there is nothing to do
    (or the restart failed, with a warning)."""
    if "OPENBLAS_CORETYPE" in os.environ or _OWN_CHOICE in os.environ:
        return
    lib = _openblas()
    if lib is None:
        return
    picked = lib.openblas_get_corename().decode()
    core = better_core_for(picked, cpu_level(_cpu_flags()))
    if core is None:
        return
    os.environ[_OWN_CHOICE] = picked
    os.environ["OPENBLAS_CORETYPE"] = core
    sys.stdout.flush()
    # the interpreter's own options too (-u, -X ...), where Python keeps them
    argv = getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv
    try:
        os.execv(sys.executable, argv)
    except OSError as e:
        del os.environ["OPENBLAS_CORETYPE"], os.environ[_OWN_CHOICE]
        print("train_gpt2.py: warning: OpenBLAS runs its %s kernels on this "
              "CPU; restarting with OPENBLAS_CORETYPE=%s failed (%s); set it "
              "yourself" % (picked, core, e), file=sys.stderr)


def describe():
    """"SkylakeX kernels (why)", as the C trainers' openblas line, or None
    without OpenBLAS."""
    lib = _openblas()
    if lib is None:
        return None
    set_to = os.environ.get("OPENBLAS_CORETYPE")
    own = os.environ.get(_OWN_CHOICE)
    if set_to and own:
        why = ("OPENBLAS_CORETYPE=%s set by this program: OpenBLAS alone "
               "chose %s" % (set_to, own))
    elif set_to:
        why = "OPENBLAS_CORETYPE=%s from the environment" % set_to
    else:
        why = "OpenBLAS's choice"
    return "%s kernels (%s)" % (lib.openblas_get_corename().decode(), why)
