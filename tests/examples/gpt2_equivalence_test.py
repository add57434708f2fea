# SPDX-License-Identifier: BSD-3-Clause
"""Equivalence of train_gpt2's TP+DP training with one process: for each
(dp, tp) mesh on 1 to 4 ranks, with and without sequence parallelism,
train_gpt2 --check trains 10 steps distributed and the same model in one
process on rank 0, and fails if the losses or the gathered parameters
differ by more than 1e-4. n_head 5 and vocab 259 divide by no tp; the MLP
width is 4C = 80 (uneven on tp=3) or, under sequence parallelism, n_inner
83 (uneven on every tp); seq 5 over tp=4 leaves a rank with no position.
The tokens: this file's text through scripts/make-tokens.

With --zero: the same with fully sharded units (--zero 1, 2, 3) on
(dp, tp) = (2,1), (3,1), (4,1), (2,2), (1,2), and (2,2) with sequence
parallelism; batch 12 over dp 4 leaves 3 rows per rank, the 259 vocabulary
rows shard over dp inside each tp shard, and the 16 positions of wpe over 3
dp ranks unevenly (6, 6, 4). Each run must also report the ZeRO collective
counts of 2 blocks + the root (U = 3 units) on every rank: U all-gathers
per step at levels 1-2, 2U - 1 = 5 at level 3, and U reduce-scatters.
The level-2 runs clip the gradients (--grad-clip 1, which clips every
step of this model), so the global norm over each mesh is checked too.

Usage: gpt2_equivalence_test.py TRAIN_GPT2_BINARY MAKE_TOKENS [--zero]
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_files as gf  # noqa: E402

CASES = [(1, 1, False), (2, 1, False), (1, 2, False), (1, 2, True),
         (1, 3, False), (1, 3, True), (2, 2, False), (2, 2, True),
         (1, 4, False), (1, 4, True)]


ZERO_CASES = [(dp, tp, False, z) for dp, tp in [(2, 1), (3, 1), (4, 1),
                                               (2, 2), (1, 2)]
              for z in (1, 2, 3)] + [(2, 2, True, z) for z in (1, 2, 3)]


def main():
    binary, make_tokens = sys.argv[1], sys.argv[2]
    zero = "--zero" in sys.argv[3:]
    cases = ZERO_CASES if zero else [c + (0,) for c in CASES]
    tmp = tempfile.mkdtemp(prefix="gpt2_equiv_")
    tokens = os.path.join(tmp, "tokens.bin")
    subprocess.run([sys.executable, make_tokens, os.path.abspath(__file__),
                    tokens], check=True, capture_output=True)
    results = []
    for dp, tp, sp, z in cases:
        name = "dp%d_tp%d%s" % (dp, tp, "_sp" if sp else "")
        if z:
            name += "_zero%d" % z
        args = ["--data", tokens, "--dp", str(dp), "--tp", str(tp),
                "--layers", "2", "--embd", "20", "--heads", "5", "--vocab",
                "259", "--positions", "16", "--batch", "4", "--seq", "5",
                "--steps", "10", "--lr", "1e-3", "--weight-decay", "0.1",
                "--seed", "7", "--bucket-mib", "0.001", "--check", "--quiet",
                "--zero", str(z)]
        if z:
            args[args.index("--batch") + 1] = "12"
        if z == 2:  # clipping by the global norm over the whole mesh
            args += ["--grad-clip", "1"]
            args.remove("--quiet")  # the step lines show the clipping
        if sp:
            args += ["--sequence-parallel", "--inner", "83"]
        start = time.time()
        rc, out, err = gf.run_train(binary, args, dp * tp)
        line = next((l for l in out.splitlines() if l.startswith("check:")), "")
        fail = None
        if rc != 0 or "check: ok" not in out:
            fail = "%s rc=%d" % (line, rc)
        elif z:
            want = "per step %d all-gathers" % (5 if z == 3 else 3)
            got = [l for l in out.splitlines() if "] fsdp: zero %d," % z in l
                   and want in l and "3 reduce-scatters" in l]
            if z == 2 and "(clipped)" not in out:
                fail = "--grad-clip 1 never clipped"
            elif len(got) != dp * tp:
                fail = "expected '%s ..., 3 reduce-scatters' from %d ranks, " \
                       "got %d" % (want, dp * tp, len(got))
            print(out[-2000:] + err[-2000:])
        print("[%s] rc=%d %s" % (name, rc, line))
        results.append((name, time.time() - start, fail))
    shutil.rmtree(tmp, ignore_errors=True)
    return gf.finish("Gpt2Equivalence", "gpt2 equivalence", results)


if __name__ == "__main__":
    sys.exit(main())
