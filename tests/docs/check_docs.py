#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The README and docs as a map that cannot rot.

For README.md, DEVELOPERS.md, docs/*.md and every examples/**/README.md:

  - each shell block marked `<!-- runnable -->` (the line before its
    ```sh fence) runs as written, from the repository's root, with bash
    -e and a time limit: as root Open MPI's "run as root" variables are
    set, as a user would export them (docs/troubleshooting.md);
  - each marked `<!-- runnable slurm -->` runs the same way on a Slurm
    cluster over simulated hosts (scripts/slurm up --hosts 2 --cpus 2
    --gpus 2, brought up for the first such block and down at the end), on
    its login node, in a scratch folder of the document's where
    `bazel-bin` is this checkout's build; a block marked
    `<!-- file NAME -->` is not run but written there as NAME (a batch
    script that a later block submits);
  - a block that exits 77 (a script's "skipped: REASON") is skipped, as
    are the Slurm blocks where the cluster cannot be made;
  - each relative link ([text](path) or [text](path#anchor)) names a file
    or folder of the tree.

The blocks call Bazel, so this runs beside `bazel test`, not inside it
(scripts/run-tests calls it); each block and each file's links are one
test case (--xml writes them as JUnit for scripts/summarize-tests).

Usage: tests/docs/check_docs.py [--xml FILE] [--list] [--limit SECONDS]
                                [--only DOC.md]
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from xml.sax.saxutils import quoteattr

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def doc_files():
    files = ["README.md", "DEVELOPERS.md"] + sorted(glob.glob("docs/*.md"))
    files += sorted(glob.glob("examples/**/README.md", recursive=True))
    return [f for f in files if os.path.exists(os.path.join(ROOT, f))]


MARKER = re.compile(r"<!-- (runnable|runnable slurm|file ([\w.-]+)) -->$")


def runnable_blocks(path):
    """[(line, kind, text)] of the marked shell blocks, kind "run",
    "slurm" or ("file", NAME); text None for a marker without its block."""
    lines = open(os.path.join(ROOT, path)).read().split("\n")
    blocks = []
    for i, line in enumerate(lines):
        m = MARKER.match(line.strip())
        if not m:
            continue
        kind = {"runnable": "run", "runnable slurm": "slurm"}.get(
            m.group(1), ("file", m.group(2)))
        fence = lines[i + 1] if i + 1 < len(lines) else ""
        indent = len(fence) - len(fence.lstrip())
        if fence.strip() != "```sh":
            blocks.append((i + 1, kind, None))  # a marker without its block
            continue
        body = []
        for j in range(i + 2, len(lines)):
            if lines[j].strip() == "```":
                break
            body.append(lines[j][indent:])
        blocks.append((i + 2, kind, "\n".join(body)))
    return blocks


class Cluster:
    """The Slurm cluster of the `runnable slurm` blocks: up on first use,
    down at the end; a scratch folder per document."""

    def __init__(self, env):
        self.env = env
        self.dir = None
        self.skip = None  # the reason it cannot be made
        self.scratch = {}
        self.top = tempfile.mkdtemp(prefix="tpdp-docs.", dir="/tmp")

    def folder(self, path):
        if path not in self.scratch:
            d = os.path.join(self.top, re.sub(r"\W", "_", path))
            os.makedirs(d)
            os.symlink(os.path.realpath(os.path.join(ROOT, "bazel-bin")),
                       os.path.join(d, "bazel-bin"))
            self.scratch[path] = d
        return self.scratch[path]

    def up(self):
        if self.dir is not None or self.skip is not None:
            return
        self.dir = tempfile.mkdtemp(prefix="tpdp-slurm-docs.", dir="/tmp")
        os.rmdir(self.dir)
        self.env = dict(self.env, TPDP_SLURM_DIR=self.dir)
        p = subprocess.run([os.path.join(ROOT, "scripts", "slurm"), "up",
                            "--hosts", "2", "--cpus", "2", "--gpus", "2"],
                           env=self.env, capture_output=True, text=True)
        if p.returncode == 77:
            self.skip = skip_reason(p.stdout, "cannot make the cluster")
        elif p.returncode != 0:
            self.skip = "FAIL"
            self.fail = "scripts/slurm up: exit %d: %s" % (
                p.returncode, (p.stdout + p.stderr)[-1500:])

    def command(self, block):
        return [os.path.join(ROOT, "scripts", "slurm"), "run", "--", "bash",
                "-e", "-o", "pipefail", "-c", block]

    def down(self):
        if self.dir is not None and self.skip is None:
            subprocess.run([os.path.join(ROOT, "scripts", "slurm"), "down"],
                           env=self.env, capture_output=True)
        shutil.rmtree(self.top, ignore_errors=True)


# Open MPI 4.1.4 launched by srun --mpi=pmix now and then crashes inside
# MPI_Init (tests/slurm/slurm_test.py says more): such a block runs again.
OMPI_INIT_CRASH = re.compile(r"Signal: Segmentation fault \(11\)\n"
                             r".*Signal code: .*\n.*Failing at address: "
                             r"\(nil\)")


def skip_reason(out, dflt):
    for line in reversed(out.splitlines()):
        if "skipped: " in line:
            return line.split("skipped: ", 1)[1]
    return dflt


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def bad_links(path):
    text = open(os.path.join(ROOT, path)).read()
    # not inside code blocks
    text = re.sub(r"(?ms)^\s*```.*?^\s*```", "", text)
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        rel = target.split("#")[0]
        full = os.path.normpath(os.path.join(ROOT, os.path.dirname(path), rel))
        if not os.path.exists(full):
            bad.append(target)
    return bad


def main():
    args = sys.argv[1:]
    xml, limit, listing, only = None, 900, False, None
    while args:
        if args[0] == "--xml":
            xml, args = args[1], args[2:]
        elif args[0] == "--limit":
            limit, args = int(args[1]), args[2:]
        elif args[0] == "--list":
            listing, args = True, args[1:]
        elif args[0] == "--only":
            only, args = args[1], args[2:]
        else:
            print(__doc__.strip())
            return 2
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cases = []  # (name, seconds, failure or None or ("skipped", reason))
    cluster = Cluster(env)
    try:
        for path in doc_files():
            if only is not None and path != only:
                continue
            links = bad_links(path)
            cases.append(("%s links" % path, 0.0, "no such file: " +
                          ", ".join(links) if links else None))
            for line, kind, block in runnable_blocks(path):
                name = "%s:%d" % (path, line)
                if listing:
                    print("== %s (%s)\n%s" % (name, kind, block))
                    continue
                if block is None:
                    cases.append((name, 0.0, "a marker without a ```sh "
                                  "block right after it"))
                    continue
                cases.append(run_block(name, path, kind, block, cluster, env,
                                       limit))
    finally:
        cluster.down()
    if listing:
        return 0
    for name, secs, fail in cases:
        word = "PASS" if fail is None else (
            "SKIP" if isinstance(fail, tuple) else "FAIL")
        detail = "" if fail is None else "\n" + (
            fail[1] if isinstance(fail, tuple) else fail)
        print("docs: %s %s (%.1f s)%s" % (word, name, secs, detail))
    failed = sum(1 for c in cases if c[2] and not isinstance(c[2], tuple))
    skipped = sum(1 for c in cases if isinstance(c[2], tuple))
    print("docs: %d checked, %d failed, %d skipped" % (len(cases), failed,
                                                        skipped))
    if xml:
        body = ""
        for name, secs, fail in cases:
            attrs = 'classname="docs" name=%s time="%.2f"' % (quoteattr(name),
                                                              secs)
            if fail is None:
                body += "<testcase %s/>" % attrs
            elif isinstance(fail, tuple):
                body += ('<testcase %s result="skipped"><skipped message=%s/>'
                         '</testcase>' % (attrs, quoteattr(fail[1][:800])))
            else:
                body += "<testcase %s><failure message=%s/></testcase>" % (
                    attrs, quoteattr(fail[:800]))
        with open(xml, "w") as f:
            f.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>'
                    '<testsuite name="docs" tests="%d" failures="%d">%s'
                    '</testsuite></testsuites>\n' % (len(cases), failed, body))
    return 1 if failed else 0


def run_block(name, path, kind, block, cluster, env, limit):
    """(name, seconds, None | failure | ("skipped", reason)) of one block."""
    cwd, cmd = ROOT, ["bash", "-e", "-o", "pipefail", "-c", block]
    if kind != "run":
        cluster.up()
        if cluster.skip == "FAIL":
            return (name, 0.0, cluster.fail)
        if cluster.skip is not None:
            return (name, 0.0, ("skipped", cluster.skip))
        cwd, env = cluster.folder(path), cluster.env
        if kind != "slurm":  # ("file", NAME): written, not run
            with open(os.path.join(cwd, kind[1]), "w") as f:
                f.write(block + "\n")
            return (name, 0.0, None)
        cmd = cluster.command(block)
    start = time.time()
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=limit)
        out = p.stdout + p.stderr
        if kind == "slurm" and p.returncode != 0 and OMPI_INIT_CRASH.search(
                out):
            # Open MPI's MPI_Init crash under srun (tests/slurm): once more
            print("docs: %s: Open MPI crashed in MPI_Init under srun; "
                  "running the block again" % name)
            p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True,
                               text=True, timeout=limit)
            out = p.stdout + p.stderr
        if p.returncode == 77:
            fail = ("skipped", skip_reason(out, "the block exited 77"))
        else:
            fail = None if p.returncode == 0 else (
                "exit %d: %s" % (p.returncode, out[-1500:]))
    except subprocess.TimeoutExpired:
        fail = "did not finish within %d s" % limit
    return (name, time.time() - start, fail)


if __name__ == "__main__":
    sys.exit(main())
