# SPDX-License-Identifier: BSD-3-Clause
"""train_gpt2 --device cuda on the lent GPU machine (scripts/gpu-check runs
it; CI has no GPU). One rank (NCCL refuses two ranks on one GPU):

  check        --device cuda --check: 10 steps against the CPU run in the
               same process, uneven heads (3) and vocabulary (67), within
               1e-4 (the trainer's own check)
  resume       a checkpoint saved on the GPU resumes on the CPU, and one
               saved on the CPU resumes on the GPU: the resumed steps'
               losses equal the uninterrupted GPU run's within 1e-4
               relative (the --check tolerance: the devices differ in
               summation order only)
  same_errors  a token outside the vocabulary and a --seq beyond the
               positions: the same message with --device cuda as with
               --device cpu
  oom          a model whose attention probabilities cannot fit: exit 1,
               one message naming the buffer, its size and the GPU

Usage: gpt2_gpu_test.py TRAIN_GPT2 [WORKDIR]
"""
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_files as gf  # noqa: E402

SMALL = ["--layers", "2", "--embd", "48", "--heads", "3", "--vocab", "67",
         "--positions", "32", "--batch", "4", "--seq", "16", "--lr", "1e-3",
         "--weight-decay", "0.1", "--quiet"]


def losses_of(out):
    return {int(m.group(1)): float(m.group(2)) for m in
            re.finditer(r"^step (\d+) loss (\S+)$", out, re.M)}


def train(binary, args):
    return gf.run_train(binary, args, 1)


def case_check(binary, tok, work):
    rc, out, err = train(binary, SMALL + ["--data", tok, "--device", "cuda",
                                          "--steps", "10", "--check"])
    print(out + err)
    if rc != 0 or "check: ok" not in out:
        return "exit %d, no 'check: ok'" % rc
    return None


def case_resume(binary, tok, work):
    base = SMALL + ["--data", tok]
    # not --quiet: the step lines are what is compared
    base = [a for a in base if a != "--quiet"]
    rc, out, err = train(binary, base + ["--device", "cuda", "--steps", "6"])
    if rc != 0:
        return "uninterrupted GPU run: exit %d: %s" % (rc, err[-800:])
    want = losses_of(out)
    for first, second in (("cuda", "cpu"), ("cpu", "cuda")):
        d = os.path.join(work, "ckpt_" + first)
        rc, out, err = train(binary, base + ["--device", first, "--steps", "3",
                                             "--save", d])
        if rc != 0:
            return "%s run saving: exit %d: %s" % (first, rc, err[-800:])
        rc, out, err = train(binary, ["--load", d, "--device", second,
                                      "--steps", "6", "--data", tok])
        if rc != 0:
            return "%s resume of a %s checkpoint: exit %d: %s" % (
                second, first, rc, err[-800:])
        got = losses_of(out)
        if sorted(got) != [3, 4, 5]:
            return "%s resume printed steps %s" % (second, sorted(got))
        for s in got:
            rel = abs(got[s] - want[s]) / abs(want[s])
            print("saved on %s, resumed on %s: step %d loss %.6f "
                  "(uninterrupted GPU run %.6f, rel %.1e)" % (
                      first, second, s, got[s], want[s], rel))
            if not rel <= 1e-4:
                return "step %d after %s -> %s: %.7f vs %.7f" % (
                    s, first, second, got[s], want[s])
    return None


def case_same_errors(binary, tok, work):
    bad_tok = os.path.join(work, "bad_tokens.bin")
    gf.write_tokens(bad_tok, [1, 2, 3, 70] + [5] * 200)  # 70 >= vocab 67
    cases = [SMALL + ["--data", bad_tok, "--steps", "2"],
             SMALL + ["--data", tok, "--seq", "33", "--steps", "2"]]
    for args in cases:
        msgs = {}
        for dev in ("cpu", "cuda"):
            rc, out, err = train(binary, args + ["--device", dev])
            line = [l for l in err.splitlines() if l.startswith("train_gpt2:")]
            if rc != 1 or not line:
                return "--device %s: exit %d, stderr %r" % (dev, rc, err[-500:])
            msgs[dev] = line[0]
        print("cpu : %s\ncuda: %s" % (msgs["cpu"], msgs["cuda"]))
        if msgs["cpu"] != msgs["cuda"]:
            return "messages differ"
    return None


def case_oom(binary, tok, work):
    # attention probabilities: 64 layers x 64 rows x 16 heads x 1024^2
    # floats = 275 GB, more than any GPU holds
    big = os.path.join(work, "big_tokens.bin")
    gf.write_tokens(big, [i % 200 for i in range(64 * 1024 + 1)])
    rc, out, err = train(binary, [
        "--device", "cuda", "--data", big, "--layers", "64", "--embd", "64",
        "--heads", "16", "--vocab", "256", "--positions", "1024", "--seq",
        "1024", "--batch", "64", "--steps", "1", "--quiet"])
    print(err.strip())
    if rc != 1:
        return "exit %d (expected 1)" % rc
    if not re.search(r"out of GPU memory allocating [0-9.]+ GiB for the "
                     r"activations' 'att' on cuda:\d", err):
        return "no message naming the buffer and its size"
    if len([l for l in err.splitlines() if "out of GPU memory" in l]) != 1:
        return "expected the message once"
    return None


def main():
    binary = sys.argv[1]
    work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(
        prefix="gpt2_gpu_")
    os.makedirs(work, exist_ok=True)
    tok = os.path.join(work, "tokens.bin")
    with open(os.path.abspath(__file__), "rb") as f:
        gf.write_tokens(tok, [b % 67 for b in f.read()[:4000]])
    results = []
    for name, fn in (("check", case_check), ("resume", case_resume),
                     ("same_errors", case_same_errors), ("oom", case_oom)):
        start = time.time()
        try:
            fail = fn(binary, tok, work)
        except Exception as e:  # a crash of the harness is a failure too
            fail = "%s: %s" % (type(e).__name__, e)
        print("%-6s Gpt2Gpu.%s%s (%.1f s)" % ("PASS" if fail is None else
                                             "FAIL", name,
                                             "" if fail is None else ": " + fail,
                                             time.time() - start))
        sys.stdout.flush()
        results.append((name, time.time() - start, fail))
    if len(sys.argv) <= 2:
        shutil.rmtree(work, ignore_errors=True)
    return gf.finish("Gpt2Gpu", "gpt2-gpu-test", results)


if __name__ == "__main__":
    sys.exit(main())
