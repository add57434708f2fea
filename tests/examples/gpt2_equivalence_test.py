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
Gradient accumulation (--accum 3 micro-batches of 4 rows) with the reducer
and at every level, on (2,1), (2,2), (4,1) and (2,2) with sequence
parallelism: --check against one process with the same micro-batches,
and the losses against one process trained on batches of 12 rows without
accumulation (the same rows per step, so the same mean gradient).

With --hsdp: hybrid sharding (--dp-replicate R) at every level on
(R, S, T) = (2,2,1), (2,1,1), (2,2,2) (with sequence parallelism at level
3), (3,2,1) and (1,3,1), dp = R * S: --check against one process, each
rank's fsdp line naming dp_shard S and dp_replicate R and, with R > 1, 3
all-reduces over dp_replicate per step (one per unit); the level-2 runs
clip (--grad-clip 1), so the norm summed over one replica group (not over
the replicas' equal shards again) is checked by the comparison.

Usage: gpt2_equivalence_test.py TRAIN_GPT2_BINARY MAKE_TOKENS [--zero|--hsdp]
"""
import os
import re
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


# (dp, tp, sp, zero) with --accum 3 --batch 4 (dp must divide 4).
ACCUM_CASES = [(2, 1, False, 0), (2, 1, False, 1), (2, 2, False, 2),
               (4, 1, False, 3), (2, 2, True, 3), (2, 2, True, 0)]


# (dp, tp, sp, zero, accum, R): dp = R * S.
HSDP_CASES = [(r * s, t, sp and z == 3, z, False, r)
              for r, s, t, sp in [(2, 2, 1, False), (2, 1, 1, False),
                                  (2, 2, 2, True), (3, 2, 1, False),
                                  (1, 3, 1, False)]
              for z in (1, 2, 3)]


def norms(out):
    """The grad_norm of each step line, in order."""
    return [float(l.split()[5]) for l in out.splitlines()
            if l.startswith("step ") and " grad_norm " in l]


def main():
    binary, make_tokens = sys.argv[1], sys.argv[2]
    zero = "--zero" in sys.argv[3:]
    if "--hsdp" in sys.argv[3:]:
        cases = HSDP_CASES
    else:
        cases = ZERO_CASES + [c + (True,) for c in ACCUM_CASES] if zero \
            else [c + (0,) for c in CASES]
        cases = [c if len(c) == 5 else c + (False,) for c in cases]
        cases = [c + (1,) for c in cases]
    tmp = tempfile.mkdtemp(prefix="gpt2_equiv_")
    tokens = os.path.join(tmp, "tokens.bin")
    subprocess.run([sys.executable, make_tokens, os.path.abspath(__file__),
                    tokens], check=True, capture_output=True)
    results = []
    big_batch = {}  # sp -> one process's losses on batches of 12 rows
    for dp, tp, sp, z, accum, rep in cases:
        name = "dp%d_tp%d%s" % (dp, tp, "_sp" if sp else "")
        if rep > 1 or "--hsdp" in sys.argv[3:]:
            name = "R%d_S%d_T%d%s" % (rep, dp // rep, tp, "_sp" if sp else "")
        if z:
            name += "_zero%d" % z
        if accum:
            name += "_accum3"
        args = ["--data", tokens, "--dp", str(dp), "--tp", str(tp),
                "--layers", "2", "--embd", "20", "--heads", "5", "--vocab",
                "259", "--positions", "16", "--batch", "4", "--seq", "5",
                "--steps", "10", "--lr", "1e-3", "--weight-decay", "0.1",
                "--seed", "7", "--bucket-mib", "0.001", "--check", "--quiet",
                "--zero", str(z)]
        if rep > 1:
            args += ["--dp-replicate", str(rep)]
        if z and not accum:
            args[args.index("--batch") + 1] = "12"
        if accum:
            args += ["--accum", "3"]
            args.remove("--quiet")  # the step lines: losses to compare
        elif z == 2:  # clipping by the global norm over the whole mesh
            args += ["--grad-clip", "1"]
            args.remove("--quiet")  # the step lines show the clipping
        if sp:
            args += ["--sequence-parallel", "--inner", "83"]
        start = time.time()
        if accum and sp not in big_batch:
            ref = [a for a in args if a not in ("--check", "--sequence-parallel")]
            for flag in ("--accum", "--dp", "--tp", "--zero"):
                i = ref.index(flag)
                del ref[i:i + 2]
            ref[ref.index("--batch") + 1] = "12"
            rrc, rout, rerr = gf.run_train(binary, ref, 1)
            big_batch[sp] = gf.losses(rout) if rrc == 0 else None
        rc, out, err = gf.run_train(binary, args, dp * tp)
        line = next((l for l in out.splitlines() if l.startswith("check:")), "")
        fail = None
        if rc != 0 or "check: ok" not in out:
            fail = "%s rc=%d" % (line, rc)
        elif accum:
            got, want = gf.losses(out), big_batch[sp]
            if want is None or sorted(got) != list(range(10)) or \
                    sorted(want) != list(range(10)):
                fail = "losses: got %s, one process %s" % (got, want)
            else:
                worst = max(gf.rel(got[k], want[k]) for k in range(10))
                if worst > 1e-5:
                    fail = "--accum 3 --batch 4 vs --batch 12: rel %.2e" % worst
        elif z:
            want = "per step %d all-gathers" % (5 if z == 3 else 3)
            sizes = "dp_shard %d, dp_replicate %d," % (dp // rep, rep)
            # HSDP: one all-reduce over dp_replicate per unit
            reps = r"3 reduce-scatters \([^)]*\)" + (
                "$" if rep == 1 else ", 3 all-reduces over dp_replicate")
            got = [l for l in out.splitlines() if "] fsdp: zero %d," % z in l
                   and want in l and re.search(reps, l) and sizes in l]
            if z == 2 and "(clipped)" not in out:
                fail = "--grad-clip 1 never clipped"
            elif z == 2 and rep > 1:
                # AdamW hides a scaled gradient: compare the norms the
                # step lines print with the one-process run's
                one = [a for a in args if a not in ("--check",)]
                for flag in ("--dp", "--tp", "--zero", "--dp-replicate"):
                    i = one.index(flag)
                    del one[i:i + 2]
                orc, oout, _ = gf.run_train(binary, one, 1)
                got, want = norms(out), norms(oout)
                if orc != 0 or len(got) != 10 or len(want) != 10 or \
                        max(gf.rel(g, w) for g, w in zip(got, want)) > 1e-4:
                    fail = "grad norms %s, one process %s" % (got, want)
            elif len(got) != dp * tp:
                fail = "expected '%s %s ..., %s' from %d ranks, got %d" % (
                    sizes, want, reps, dp * tp, len(got))
            print(out[-2000:] + err[-2000:])
        print("[%s] rc=%d %s" % (name, rc, line))
        results.append((name, time.time() - start, fail))
    shutil.rmtree(tmp, ignore_errors=True)
    return gf.finish("Gpt2Equivalence", "gpt2 equivalence", results)


if __name__ == "__main__":
    sys.exit(main())
