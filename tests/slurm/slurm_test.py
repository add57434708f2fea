#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""tpdp launched as clusters launch it: a real Slurm (scripts/slurm up: a
slurmctld, a slurmd per simulated host, a munged per host, one key) on 2
simulated hosts x 2 CPUs, brought up here and torn down at the end, also
when a case fails.

Cases (each a JUnit case of Bazel's XML):
  - train_mlp --dp 2 --tp 2 --check under srun -N 2 -n 4 --mpi=pmix;
  - local rank, local size and node count as the library sees them
    (launch_check) equal SLURM_LOCALID, SLURM_NTASKS_PER_NODE, SLURM_NNODES;
  - the multi-host collective and communicator tests, and the byte counts
    across hosts, under srun;
  - train_gpt2 dp=2 across the hosts, tp=2 within, --check;
  - a checkpoint saved under srun on the 2 hosts resumes under mpirun on
    this machine (one host), with the uninterrupted run's losses;
  - sbatch of the batch script of docs/launch.md, its output file read back;
  - faults: a task SIGSTOPped on the other host ends the job within
    TPDP_TIMEOUT_S + 10 s, tpdp's report naming the rank and its host, srun
    exiting non-zero; a task killed ends it within 10 s
    (--kill-on-bad-exit); scancel of a running job leaves no process on
    either host and nothing in either host's /dev/shm;
  - the wrong launcher: srun --mpi=none of 4 tasks, each refused by
    tpdp_init with TPDP_ERR_INVALID_ARGUMENT naming SLURM_NTASKS=4;
  - a cluster of one node (no namespaces) runs srun --mpi=pmix too.
Afterwards no slurm or munge process of these clusters is left.

Where the cluster cannot be made (scripts/slurm up exits 77: not root,
Slurm not installed, no namespaces) every case reports skipped with the
reason.

Usage: slurm_test.py TRAIN_MLP TRAIN_GPT2 MAKE_TOKENS LAUNCH_CHECK
                     FAULT_HELPER COLLECTIVES_BIN COMM_BIN TRAFFIC_BIN
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import gpt2_files as gf  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SLURM = os.path.join(ROOT, "scripts", "slurm")
TIMEOUT_S = 5  # TPDP_TIMEOUT_S of the fault cases
GPT2 = ["--layers", "2", "--embd", "20", "--heads", "5", "--vocab", "259",
        "--positions", "16", "--batch", "4", "--seq", "5", "--lr", "1e-3",
        "--weight-decay", "0.1", "--seed", "7", "--bucket-mib", "0.001"]
CASES = ["srun train_mlp dp=2 tp=2 --check across 2 hosts",
         "local rank, local size, nodes equal Slurm's",
         "srun collectives_multihost", "srun comm_multihost",
         "srun traffic_test (bytes across hosts)",
         "srun train_gpt2 dp across, tp within --check",
         "checkpoint saved under srun resumes under mpirun on one host",
         "sbatch of docs/launch.md's batch script",
         "SIGSTOP on the other host ends the job",
         "a killed task ends the job (--kill-on-bad-exit)",
         "scancel leaves no process and no /dev/shm segment",
         "srun --mpi=none is refused by tpdp_init",
         "one node, no namespaces: srun --mpi=pmix",
         "nothing left running"]


# Open MPI 4.1.4 (Debian 12) launched by srun --mpi=pmix now and then
# crashes inside MPI_Init: a call through a NULL pointer in its TCP
# transport's event handler (ompi_mpi_init -> opal_progress ->
# mca_btl_tcp), seen in about 1 of 50 launches of 4 tasks and 1 of 5 of 16
# tasks on the simulated cluster, with a plain MPI program as well, and
# never under mpirun. A launch that died so is launched once more.
OMPI_INIT_CRASH = re.compile(r"Signal: Segmentation fault \(11\)\n"
                             r".*Signal code: .*\n.*Failing at address: "
                             r"\(nil\)")
RETRIED = []


class Cluster:
    """scripts/slurm with a folder of its own."""

    def __init__(self, name):
        self.dir = tempfile.mkdtemp(prefix="tpdp-slurm-%s." % name,
                                    dir="/tmp")
        os.rmdir(self.dir)  # scripts/slurm up makes it
        self.env = dict(os.environ, TPDP_SLURM_DIR=self.dir)

    def slurm(self, *args, timeout=120):
        return subprocess.run([SLURM] + list(args), env=self.env,
                              capture_output=True, text=True,
                              timeout=timeout)

    def run(self, cmd, host=0, env=None, timeout=300):
        """cmd (a list) on the cluster's host `host`: (rc, out, seconds).
        A launch that Open MPI's MPI_Init crashed (OMPI_INIT_CRASH) runs
        once more, and says so."""
        rc, out, secs = self.run_once(cmd, host, env, timeout)
        if rc != 0 and OMPI_INIT_CRASH.search(out):
            RETRIED.append(" ".join(os.path.basename(c) for c in cmd[:8]))
            print("  note: Open MPI crashed in MPI_Init under srun (its "
                  "known race, docs/launch.md); launched again")
            rc, out, secs = self.run_once(cmd, host, env, timeout)
        return rc, out, secs

    def run_once(self, cmd, host, env, timeout):
        e = dict(self.env, **(env or {}))
        start = time.time()
        try:
            p = subprocess.run([SLURM, "run", "--host", str(host), "--"] +
                               cmd, env=e, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               timeout=timeout)
            return p.returncode, p.stdout, time.time() - start
        except subprocess.TimeoutExpired as x:
            out = x.stdout.decode() if isinstance(x.stdout, bytes) else \
                (x.stdout or "")
            return -1, out + "\n(timed out)", time.time() - start


def tail(text, n=2500):
    return text[-n:]


def main():
    (mlp, gpt2, make_tokens, check, helper, coll_bin, comm_bin,
     traffic_bin) = [os.path.abspath(a) for a in sys.argv[1:9]]
    cases = []

    def case(name, fn):
        start = time.time()
        try:
            fail = fn()
        except Exception as e:  # a crash of the check is a failure
            fail = "%s: %r" % (name, e)
        print("[%s] %s (%.1f s)" % (name, "ok" if fail is None else
                                   "FAILED: " + fail, time.time() - start),
              flush=True)
        cases.append((name, time.time() - start, fail))

    c = Cluster("2h")
    up = c.slurm("up", "--hosts", "2", "--cpus", "2")
    print(up.stdout + up.stderr, end="", flush=True)
    if up.returncode == 77:
        reason = "cannot make the cluster"
        for line in up.stdout.splitlines():
            if line.startswith("slurm: skipped: "):
                reason = line[len("slurm: skipped: "):]
        print("SKIPPED: " + reason)
        return gf.finish("Slurm", "slurm",
                         [(n, 0.0, ("skipped", reason)) for n in CASES])
    if up.returncode != 0:
        return gf.finish("Slurm", "slurm", [("scripts/slurm up", 0.0,
                                             "exit %d" % up.returncode)])
    tmp = tempfile.mkdtemp(prefix="tpdp-slurm-test.", dir="/tmp")
    srun4 = ["srun", "-N", "2", "--ntasks-per-node", "2", "--mpi=pmix"]
    try:
        run_cases(c, case, tmp, srun4, mlp, gpt2, make_tokens, check, helper,
                  coll_bin, comm_bin, traffic_bin)
    finally:
        down = c.slurm("down")
        print(down.stdout + down.stderr, end="")
        shutil.rmtree(tmp, ignore_errors=True)

    def one_node():
        one = Cluster("1h")
        r = one.slurm("up", "--hosts", "1", "--cpus", "2")
        if r.returncode != 0:
            return "up: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr)
        try:
            rc, out, _ = one.run(["srun", "-n", "2", "--mpi=pmix", check])
            if rc != 0 or out.count("local_size 2 nodes 1") != 2:
                return "rc=%d\n%s" % (rc, tail(out))
        finally:
            d = one.slurm("down")
            if d.returncode != 0:
                return "down: %s%s" % (d.stdout, d.stderr)
        return None
    case(CASES[12], one_node)

    def nothing_left():
        left = subprocess.run(["pgrep", "-a", "slurmctld|slurmd|slurmstepd|"
                               "munged"], capture_output=True, text=True)
        ours = [l for l in left.stdout.splitlines() if "tpdp-slurm-" in l]
        return "still running:\n" + "\n".join(ours) if ours else None
    case(CASES[13], nothing_left)
    if RETRIED:
        print("slurm: launched again after Open MPI's MPI_Init crash: %s"
              % "; ".join(RETRIED))
    return gf.finish("Slurm", "slurm", cases)


def run_cases(c, case, tmp, srun4, mlp, gpt2, make_tokens, check, helper,
              coll_bin, comm_bin, traffic_bin):
    def train_mlp():
        rc, out, _ = c.run(srun4 + [mlp, "--dp", "2", "--tp", "2", "--hidden",
                                    "67", "--steps", "10", "--check"])
        if rc != 0 or "check: ok" not in out:
            return "rc=%d\n%s" % (rc, tail(out))
        print("  " + [l for l in out.splitlines()
                      if l.startswith("check: max")][0])
        return None
    case(CASES[0], train_mlp)

    def local_ranks():
        rc, out, _ = c.run(srun4 + [check])
        lines = [l for l in out.splitlines() if l.startswith("launch_check: rank")]
        if rc != 0 or len(lines) != 4:
            return "rc=%d, %d lines\n%s" % (rc, len(lines), tail(out))
        hosts = set()
        for l in lines:
            print("  " + l)
            f = dict(re.findall(r"(SLURM_\w+)=(\S+)", l))
            m = re.search(r"rank (\d+) of 4 on (\S+) local_rank (\d+) "
                          r"local_size (\d+) nodes (\d+)", l)
            rank, host, lr, ls, nodes = m.groups()
            hosts.add(host)
            want = (f["SLURM_PROCID"], f["SLURM_LOCALID"],
                    f["SLURM_NTASKS_PER_NODE"], f["SLURM_NNODES"])
            if (rank, lr, ls, nodes) != want:
                return "the library's (rank, local rank, local size, nodes) " \
                       "%s differ from Slurm's %s" % ((rank, lr, ls, nodes),
                                                      want)
        if hosts != {"tpdp-host0", "tpdp-host1"}:
            return "tasks ran on %s, not on both hosts" % sorted(hosts)
        return None
    case(CASES[1], local_ranks)

    def gtest(binary, *args):
        def fn():
            rc, out, _ = c.run(srun4 + [binary] + list(args), timeout=600)
            passed = len(re.findall(r"^\[  PASSED  \]", out, re.M))
            if rc != 0 or passed != 4:
                return "rc=%d, %d of 4 ranks passed\n%s" % (rc, passed,
                                                           tail(out))
            print("  " + re.findall(r"^\[  PASSED  \].*", out, re.M)[0])
            return None
        return fn
    case(CASES[2], gtest(coll_bin, "--gtest_filter=Collectives.*:"
                         "CollectivesRingAvg.*"))
    case(CASES[3], gtest(comm_bin))
    case(CASES[4], gtest(traffic_bin))

    # train_gpt2: a reference run in one process for steps 0..9
    tokens = os.path.join(tmp, "tokens.bin")
    subprocess.run([sys.executable, make_tokens, os.path.join(ROOT, "README.md"),
                    tokens], check=True, capture_output=True)
    data = ["--data", tokens]
    rc, out, err = gf.run_train(gpt2, data + GPT2 + ["--steps", "10"], 1)
    ref = gf.losses(out)
    ok_ref = rc == 0 and sorted(ref) == list(range(10))

    def gpt2_check():
        rc, out, _ = c.run(srun4 + [gpt2] + data + GPT2 +
                           ["--dp", "2", "--tp", "2", "--steps", "4",
                            "--check"])
        if rc != 0 or "check: ok" not in out:
            return "rc=%d\n%s" % (rc, tail(out))
        print("  " + [l for l in out.splitlines()
                      if l.startswith("check:")][0])
        return None
    case(CASES[5], gpt2_check)

    def resume():
        if not ok_ref:
            return "the one-process reference run failed: rc=%d\n%s" % (
                rc, tail(out + err))
        ck = os.path.join(tmp, "ck")
        r, o, _ = c.run(srun4 + [gpt2] + data + GPT2 +
                        ["--dp", "2", "--tp", "2", "--steps", "6",
                         "--save-every", "3", "--save", ck])
        got = gf.losses(o)
        if r != 0 or "checkpoint: step 6 saved" not in o:
            return "save: rc=%d\n%s" % (r, tail(o))
        worst = max(gf.rel(got[s], ref[s]) for s in range(6))
        if worst > 1e-4:
            return "steps 0..5 under srun %s vs one process %s" % (got, ref)
        # mpirun on this machine: one host, outside the cluster
        r, o, e = gf.run_train(gpt2, ["--load", ck, "--steps", "10", "--dp",
                                      "1", "--tp", "2", "--check"], 2)
        got = gf.losses(o)
        if r != 0 or "check: ok" not in o or \
                "checkpoint: resumed at step 6" not in o:
            return "resume: rc=%d\n%s" % (r, tail(o + e))
        if sorted(got) != [6, 7, 8, 9]:
            return "resumed steps %s, not 6..9" % sorted(got)
        worst2 = max(gf.rel(got[s], ref[s]) for s in got)
        print("  saved under srun (steps 0..5 max rel diff %.1e), resumed "
              "under mpirun -np 2 (steps 6..9 max rel diff %.1e)"
              % (worst, worst2))
        if worst2 > 1e-4:
            return "steps 6..9 %s vs one process %s" % (got, ref)
        return None
    case(CASES[6], resume)

    def sbatch():
        script = batch_script()
        work = os.path.join(tmp, "sbatch")
        os.makedirs(work)
        # bazel-bin/examples/train_mlp, as the script names it
        os.makedirs(os.path.join(work, "bazel-bin", "examples"))
        os.symlink(mlp, os.path.join(work, "bazel-bin", "examples",
                                     "train_mlp"))
        with open(os.path.join(work, "train.sbatch"), "w") as f:
            f.write(script)
        rc, out, secs = c.run(["bash", "-c", "cd %s && sbatch --wait "
                               "train.sbatch" % work], timeout=300)
        logs = glob.glob(os.path.join(work, "tpdp-mlp-*.out"))
        if rc != 0 or len(logs) != 1:
            return "sbatch --wait: rc=%d, output files %s\n%s" % (
                rc, logs, tail(out))
        text = open(logs[0]).read()
        if "check: ok" not in text or not os.path.isdir(
                os.path.join(work, "ckpt")):
            return "%s lacks 'check: ok' (or no ckpt/):\n%s" % (logs[0],
                                                                tail(text))
        print("  %s (%.1f s): %s" % (os.path.basename(logs[0]), secs,
                                     [l for l in text.splitlines()
                                      if l.startswith("check: max")][0]))
        return None
    case(CASES[7], sbatch)

    def stop():
        # Rank 3 (host 1) stops before its dp allreduce (dp across the
        # hosts); ranks 0 and 2 wait 3 times longer, so that the first
        # report is rank 1's, on host 0, naming rank 3 from the copies of
        # host 1's board (fault_test.sh's stop_remote).
        rc, out, secs = c.run(srun4 + [
            "bash", "-c", 'case $SLURM_PROCID in 0|2) export '
            'TPDP_TIMEOUT_S=%d ;; esac; exec "$0" "$@"' % (3 * TIMEOUT_S),
            helper, "allreduce"],
            env={"TPDP_TIMEOUT_S": str(TIMEOUT_S), "FAULT": "stop:3:3"},
            timeout=120)
        print("  srun exited %d after %.1f s (TPDP_TIMEOUT_S=%d)" % (
            rc, secs, TIMEOUT_S))
        want = [r"\[rank 1\] tpdp ERROR: tpdp_allreduce timed out after \d+ s"
                r" \(TPDP_TIMEOUT_S=%d\): allreduce f32 x 1048576 #\d+ on "
                r"communicator 'mesh\.dp'" % TIMEOUT_S,
                r"Not arrived: rank 3 on host tpdp-host1 \(rank 1 of "
                r"'mesh.dp'\) has not arrived and is not responding"]
        for w in want:
            if not re.search(w, out):
                return "no /%s/ in:\n%s" % (w, tail(out))
        if rc == 0 or secs > TIMEOUT_S + 10:
            return "srun exited %d after %.1f s" % (rc, secs)
        return left_behind(helper)
    case(CASES[8], stop)

    def kill():
        rc, out, secs = c.run(srun4 + ["--kill-on-bad-exit=1", helper,
                                       "allreduce"],
                              env={"TPDP_TIMEOUT_S": "60",
                                   "FAULT": "kill:3:3:2"}, timeout=120)
        print("  srun exited %d after %.1f s" % (rc, secs))
        if "rank 3: SIGKILL during tpdp_allreduce" not in out or \
                not re.search(r"tpdp-host1: task 3: Killed", out):
            return "no kill report in:\n" + tail(out)
        if rc == 0 or secs > 10:
            return "srun exited %d after %.1f s" % (rc, secs)
        return left_behind(helper)
    case(CASES[9], kill)

    def scancel():
        work = os.path.join(tmp, "scancel")
        os.makedirs(work)
        rc, out, _ = c.run(["sbatch", "--parsable", "-N", "2",
                            "--ntasks-per-node", "2", "-o",
                            os.path.join(work, "%j.out"), "--wrap",
                            "srun --mpi=pmix %s --dp 2 --tp 2 --steps 1000000 "
                            "--hidden 256 --width 128" % mlp])
        job = out.strip().splitlines()[-1] if rc == 0 else ""
        if not job.isdigit():
            return "sbatch: rc=%d\n%s" % (rc, out)
        # Running once every task has mapped its shared memory (Open MPI's
        # segments of each host are in its /dev/shm).
        seen = {}
        for _ in range(300):
            seen = {h: shm(c, h) for h in (0, 1)}
            if all(len(v) >= 2 for v in seen.values()):
                break
            time.sleep(0.1)
        else:
            return "the job's tasks never showed on both hosts: %s" % seen
        start = time.time()
        c.run(["scancel", job])
        for _ in range(300):
            _, q, _ = c.run(["squeue", "-h", "-j", job])
            if not q.strip() or "Invalid job id" in q:
                break
            time.sleep(0.1)
        gone = time.time() - start
        print("  /dev/shm while running: %s; job gone %.1f s after scancel"
              % (seen, gone))
        for h in (0, 1):
            left = shm(c, h)
            if left:
                return "host %d's /dev/shm still has %s" % (h, left)
            stray = [p for p in host_processes(c, h)
                     if p.startswith(("train_mlp", "slurmstepd"))]
            if stray:
                return "host %d still runs %s" % (h, stray)
        return left_behind(mlp)
    case(CASES[10], scancel)

    def wrong_launcher():
        rc, out, _ = c.run(["srun", "-N", "2", "-n", "4", "--mpi=none", check])
        refused = re.findall(r"^launch_check: TPDP_ERR_INVALID_ARGUMENT: "
                             r"tpdp_init: this process is one of 4 tasks of a "
                             r"Slurm step \(SLURM_NTASKS=4; SLURM_PROCID=\d.*"
                             r"its MPI world would be 1 rank.*srun "
                             r"--mpi=pmix -n 4", out, re.M)
        if rc == 0 or len(refused) != 4:
            return "rc=%d, %d of 4 tasks refused:\n%s" % (rc, len(refused),
                                                          tail(out))
        print("  " + refused[0][:160] + "...")
        return None
    case(CASES[11], wrong_launcher)


def shm(c, host):
    _, out, _ = c.run(["ls", "-A", "/dev/shm"], host=host)
    return out.split()


def left_behind(binary):
    """A process of `binary` (an absolute path: this build's, not another
    checkout's) still alive on this machine (every host's processes are
    this machine's), or None."""
    time.sleep(0.5)
    p = subprocess.run(["pgrep", "-a", "-f", "^[^ ]*" + re.escape(binary)],
                       capture_output=True, text=True)
    mine = [l for l in p.stdout.splitlines() if "pgrep" not in l]
    return "left running: %s" % mine if mine else None


def host_processes(c, host):
    """The commands of the processes in `host`'s network namespace."""
    _, ns, _ = c.run(["readlink", "/proc/self/ns/net"], host=host)
    ns = ns.strip()
    out = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            if os.readlink(d + "/ns/net") == ns:
                out.append(open(d + "/comm").read().strip())
        except OSError:
            pass
    return out


def batch_script():
    """The ```sh block after '<!-- file train.sbatch -->' in
    docs/launch.md."""
    lines = open(os.path.join(ROOT, "docs", "launch.md")).read().split("\n")
    for i, line in enumerate(lines):
        if line.strip() == "<!-- file train.sbatch -->":
            body = []
            for l in lines[i + 2:]:
                if l.strip() == "```":
                    return "\n".join(body) + "\n"
                body.append(l)
    raise RuntimeError("docs/launch.md has no '<!-- file train.sbatch -->' "
                       "block")


if __name__ == "__main__":
    sys.exit(main())
