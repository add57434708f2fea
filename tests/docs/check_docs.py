#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The README and docs as a map that cannot rot.

For README.md, DEVELOPERS.md, docs/*.md and every examples/**/README.md:

  - each shell block marked `<!-- runnable -->` (the line before its
    ```sh fence) runs as written, from the repository's root, with bash
    -e and a time limit: as root Open MPI's "run as root" variables are
    set, as a user would export them (docs/troubleshooting.md);
  - each relative link ([text](path) or [text](path#anchor)) names a file
    or folder of the tree.

The blocks call Bazel, so this runs beside `bazel test`, not inside it
(scripts/run-tests calls it); each block and each file's links are one
test case (--xml writes them as JUnit for scripts/summarize-tests).

Usage: tests/docs/check_docs.py [--xml FILE] [--list] [--limit SECONDS]
"""
import glob
import os
import re
import subprocess
import sys
import time
from xml.sax.saxutils import quoteattr

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def doc_files():
    files = ["README.md", "DEVELOPERS.md"] + sorted(glob.glob("docs/*.md"))
    files += sorted(glob.glob("examples/**/README.md", recursive=True))
    return [f for f in files if os.path.exists(os.path.join(ROOT, f))]


def runnable_blocks(path):
    """[(line, text)] of the shell blocks marked runnable."""
    lines = open(os.path.join(ROOT, path)).read().split("\n")
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != "<!-- runnable -->":
            continue
        fence = lines[i + 1] if i + 1 < len(lines) else ""
        indent = len(fence) - len(fence.lstrip())
        if fence.strip() != "```sh":
            blocks.append((i + 1, None))  # a marker without its block
            continue
        body = []
        for j in range(i + 2, len(lines)):
            if lines[j].strip() == "```":
                break
            body.append(lines[j][indent:])
        blocks.append((i + 2, "\n".join(body)))
    return blocks


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
    xml, limit, listing = None, 900, False
    while args:
        if args[0] == "--xml":
            xml, args = args[1], args[2:]
        elif args[0] == "--limit":
            limit, args = int(args[1]), args[2:]
        elif args[0] == "--list":
            listing, args = True, args[1:]
        else:
            print(__doc__.strip())
            return 2
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cases = []  # (name, seconds, failure or None)
    for path in doc_files():
        links = bad_links(path)
        cases.append(("%s links" % path, 0.0,
                      "no such file: " + ", ".join(links) if links else None))
        for line, block in runnable_blocks(path):
            name = "%s:%d" % (path, line)
            if listing:
                print("== %s\n%s" % (name, block))
                continue
            if block is None:
                cases.append((name, 0.0, "<!-- runnable --> without a ```sh "
                              "block right after it"))
                continue
            start = time.time()
            try:
                p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block],
                                   cwd=ROOT, env=env, capture_output=True,
                                   text=True, timeout=limit)
                fail = None if p.returncode == 0 else (
                    "exit %d: %s" % (p.returncode, (p.stdout + p.stderr)[-1500:]))
            except subprocess.TimeoutExpired:
                fail = "did not finish within %d s" % limit
            cases.append((name, time.time() - start, fail))
    if listing:
        return 0
    for name, secs, fail in cases:
        print("docs: %s %s (%.1f s)%s" % ("PASS" if fail is None else "FAIL",
                                          name, secs,
                                          "" if fail is None else "\n" + fail))
    failed = sum(1 for c in cases if c[2])
    print("docs: %d checked, %d failed" % (len(cases), failed))
    if xml:
        body = ""
        for name, secs, fail in cases:
            attrs = 'classname="docs" name=%s time="%.2f"' % (quoteattr(name),
                                                              secs)
            body += ("<testcase %s/>" % attrs if fail is None else
                     "<testcase %s><failure message=%s/></testcase>" % (
                         attrs, quoteattr(fail[:800])))
        with open(xml, "w") as f:
            f.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>'
                    '<testsuite name="docs" tests="%d" failures="%d">%s'
                    '</testsuite></testsuites>\n' % (len(cases), failed, body))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
