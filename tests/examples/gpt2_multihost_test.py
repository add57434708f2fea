#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""train_gpt2 across 2 simulated hosts x 2 ranks (scripts/multihost).

dp=2 across the hosts and tp=2 inside each (the mesh dp=2,tp=2: world ranks
0-1 on the first host form a TP group): --check passes (the same training
in one process); a run saved from the two hosts after step 5 (--steps 6
--save-every 3 --save DIR) prints the losses of an uninterrupted
one-process run for steps 0..5, and resumes on one host, in one process
and on dp=1,tp=2, with that run's losses for steps 6..9 (within 1e-4) and
its own --check passing.

Run outside the hosts, it runs itself inside them (scripts/multihost
--no-mpirun); where they cannot be made its cases report skipped, with the
reason.

Usage: gpt2_multihost_test.py TRAIN_GPT2 MAKE_TOKENS
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_files as gf  # noqa: E402

MODEL = ["--layers", "2", "--embd", "20", "--heads", "5", "--vocab", "259",
         "--positions", "16", "--batch", "4", "--seq", "5", "--lr", "1e-3",
         "--weight-decay", "0.1", "--seed", "7", "--bucket-mib", "0.001"]
CASES = ["check dp=2 across hosts, tp=2 within",
         "save from two hosts after step 5",
         "resume on one host, one process",
         "resume on one host, dp=1,tp=2"]


def outside(argv):
    """Run this script inside the simulated hosts; skipped where they
    cannot be made."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    p = subprocess.run([os.path.join(root, "scripts", "multihost"),
                        "--hosts", "2", "--ranks-per-host", "2",
                        "--no-mpirun", "--", sys.executable,
                        os.path.abspath(__file__)] + argv[1:],
                       capture_output=True, text=True)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    if p.returncode != 77:
        return p.returncode
    reason = "cannot make simulated hosts"
    for line in p.stdout.splitlines():
        if line.startswith("multihost: skipped: "):
            reason = line[len("multihost: skipped: "):]
    print("SKIPPED: " + reason)
    return gf.finish("Gpt2Multihost", "gpt2 multihost",
                     [(c, 0.0, ("skipped", reason)) for c in CASES])


def main():
    if "TPDP_MULTIHOST_MPIRUN" not in os.environ:
        return outside(sys.argv)
    binary, make_tokens = sys.argv[1], sys.argv[2]
    local_mpirun = list(gf.MPIRUN)
    across = os.environ["TPDP_MULTIHOST_MPIRUN"].split() + ["--timeout", "300"]
    tmp = tempfile.mkdtemp(prefix="gpt2_multihost_")
    tokens = os.path.join(tmp, "tokens.bin")
    ck = os.path.join(tmp, "ck")
    subprocess.run([sys.executable, make_tokens, os.path.abspath(__file__),
                    tokens], check=True, capture_output=True)
    data = ["--data", tokens]
    cases = []

    def train(args, np_, hosts):
        gf.MPIRUN = across if hosts == 2 else local_mpirun
        return gf.run_train(binary, args, np_)

    def case(name, fn):
        start = time.time()
        try:
            fail = fn()
        except Exception as e:  # a crash of the check is a failure
            fail = "%s: %r" % (name, e)
        print("[%s] %s" % (name, "ok" if fail is None else "FAILED: " + fail))
        cases.append((name, time.time() - start, fail))

    rc, out, err = train(data + MODEL + ["--steps", "10"], 1, 1)
    ref = gf.losses(out)
    if rc != 0 or sorted(ref) != list(range(10)):
        print(out[-2000:] + err[-2000:])
        return gf.finish("Gpt2Multihost", "gpt2 multihost",
                         [("reference run", 0, "rc=%d" % rc)])

    def check():
        rc, out, err = train(data + MODEL + ["--dp", "2", "--tp", "2",
                                             "--steps", "4", "--check"], 4, 2)
        if rc != 0 or "check: ok" not in out:
            return "rc=%d\n%s%s" % (rc, out[-1500:], err[-1500:])
        print("  " + [l for l in out.splitlines() if l.startswith("check:")][0])
        return None
    case(CASES[0], check)

    def save():
        rc, out, err = train(data + MODEL + [
            "--dp", "2", "--tp", "2", "--steps", "6", "--save-every", "3",
            "--save", ck], 4, 2)
        got = gf.losses(out)
        if rc != 0 or "checkpoint: step 6 saved" not in out:
            return "rc=%d\n%s%s" % (rc, out[-1500:], err[-1500:])
        worst = max(gf.rel(got[s], ref[s]) for s in range(6))
        print("  steps 0..5 max rel diff %.3e" % worst)
        if worst > 1e-4:
            return "losses %s vs one process %s" % (got, ref)
        return None
    case(CASES[1], save)

    def resume(np_, dp, tp):
        def fn():
            rc, out, err = train(["--load", ck, "--steps", "10", "--dp",
                                  str(dp), "--tp", str(tp), "--check"], np_, 1)
            got = gf.losses(out)
            if rc != 0 or "check: ok" not in out:
                return "rc=%d\n%s%s" % (rc, out[-1500:], err[-1500:])
            if "checkpoint: resumed at step 6" not in out:
                return "no 'resumed at step 6' line:\n" + out[-1500:]
            if sorted(got) != [6, 7, 8, 9]:
                return "printed steps %s, not 6..9" % sorted(got)
            worst = max(gf.rel(got[s], ref[s]) for s in got)
            print("  steps 6..9 max rel diff %.3e" % worst)
            if worst > 1e-4:
                return "losses %s vs one process %s" % (got, ref)
            return None
        return fn
    case(CASES[2], resume(1, 1, 1))
    case(CASES[3], resume(2, 1, 2))
    shutil.rmtree(tmp, ignore_errors=True)
    return gf.finish("Gpt2Multihost", "gpt2 multihost", cases)


if __name__ == "__main__":
    sys.exit(main())
