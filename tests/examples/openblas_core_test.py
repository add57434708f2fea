# SPDX-License-Identifier: BSD-3-Clause
"""examples/torch/openblas_core.py, the torch example's choice of OpenBLAS
kernels (without torch: the module is plain Python over ctypes):
  - levels and values: the same cases as nn_cpu_test's BlasCore for the C
    trainers (examples/common/blas_core.c), worked out by hand;
  - the restart: a script whose OpenBLAS answers "Prescott" (a stand-in
    for OpenBLAS on a CPU it does not recognise) restarts exactly once with
    the value this CPU's flags call for, and says so; an OPENBLAS_CORETYPE
    already set wins (no restart).
usage: openblas_core_test.py PATH/openblas_core.py"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_files as gf  # noqa: E402

MODULE_DIR = os.path.dirname(os.path.abspath(sys.argv[1]))
sys.path.insert(0, MODULE_DIR)
import openblas_core as ob  # noqa: E402

# A script that runs choose_core() on an OpenBLAS answering "Prescott"
# until OPENBLAS_CORETYPE is set, logging each start.
SCRIPT = r'''
import os, sys
sys.path.insert(0, %(dir)r)
import openblas_core as ob
with open(%(log)r, "a") as f:
    f.write("start %%s\n" %% os.environ.get("OPENBLAS_CORETYPE", ""))
class Fake:
    def openblas_get_corename(self):
        return os.environ.get("OPENBLAS_CORETYPE", "Prescott").encode()
ob._openblas = lambda: Fake()
ob.choose_core()
print(ob.describe())
'''


def run_script(tmp, env_extra):
    log = os.path.join(tmp, "log")
    if os.path.exists(log):
        os.remove(log)
    path = os.path.join(tmp, "s.py")
    with open(path, "w") as f:
        f.write(SCRIPT % {"dir": MODULE_DIR, "log": log})
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", ob._OWN_CHOICE)}
    env.update(env_extra)
    out = subprocess.run([sys.executable, path], env=env, timeout=60,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True).stdout.strip()
    with open(log) as f:
        return out, f.read().split("\n")[:-1]


def main():
    cases = []

    def case(name, fn):
        t0 = time.time()
        try:
            res = fn()
        except AssertionError as e:
            res = str(e) or "assertion failed"
        print("[%s] %s" % (name, "ok" if res is None else res))
        cases.append((name, time.time() - t0, res))

    def levels():
        assert ob.cpu_level(["avx512f", "avx512bw", "avx512vl",
                             "avx512dq", "avx2", "fma", "avx"]) == 3
        assert ob.cpu_level(["avx512f", "avx2", "fma", "avx"]) == 2
        assert ob.cpu_level(["avx2", "avx"]) == 1
        assert ob.cpu_level(["sse4_2"]) == 0
        assert ob.better_core_for("Prescott", 3) == "SKYLAKEX"
        assert ob.better_core_for("Haswell", 3) == "SKYLAKEX"
        assert ob.better_core_for("Prescott", 2) == "HASWELL"
        assert ob.better_core_for("Nehalem", 1) == "SANDYBRIDGE"
        assert ob.better_core_for("Cooperlake", 3) is None
        assert ob.better_core_for("Zen", 2) is None
        assert ob.better_core_for("SkylakeX", 2) is None
        assert ob.better_core_for("Prescott", 0) is None

    flags = []
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                break
    f = set(flags)
    want = ("SKYLAKEX" if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= f
            else "HASWELL" if {"avx2", "fma"} <= f
            else "SANDYBRIDGE" if "avx" in f else None)

    with tempfile.TemporaryDirectory() as tmp:
        def restart():
            out, starts = run_script(tmp, {})
            if want is None:
                assert starts == ["start "], starts
                return None
            assert starts == ["start ", "start " + want], starts
            expect = ("%s kernels (OPENBLAS_CORETYPE=%s set by this program: "
                      "OpenBLAS alone chose Prescott)" % (want, want))
            assert out == expect, (out, expect)

        def user_wins():
            out, starts = run_script(tmp, {"OPENBLAS_CORETYPE": "HASWELL"})
            assert starts == ["start HASWELL"], starts
            assert out == ("HASWELL kernels (OPENBLAS_CORETYPE=HASWELL from "
                           "the environment)"), out

        case("levels_and_values", levels)
        case("restart_once", restart)
        case("user_variable_wins", user_wins)
    gf.junit(os.environ.get("XML_OUTPUT_FILE"), "OpenblasCore", cases)
    failed = sum(1 for c in cases if c[2] is not None)
    print("openblas_core_test: %d passed, %d failed"
          % (len(cases) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
