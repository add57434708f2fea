#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs a GoogleTest binary on 2 simulated hosts x N MPI ranks each
# (scripts/multihost): multihost_test.sh N BINARY [ARGS...]. As
# tests/mpirun_test.sh, rank 0 alone writes Bazel's XML result file and
# mpirun fails the test if any rank fails. Where the hosts cannot be made
# (scripts/multihost exits 77), every case of the binary is reported
# skipped with the reason, in the XML that scripts/summarize-tests reads.
set -u
per_host="$1"
bin="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
shift 2
here="$(cd "$(dirname "$0")/.." && pwd)"
multihost="$here/scripts/multihost"
[ -x "$multihost" ] || multihost="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-tpdp}/scripts/multihost"
out=$(mktemp)
"$multihost" --hosts 2 --ranks-per-host "$per_host" -- \
  bash -c 'if [ "${OMPI_COMM_WORLD_RANK:-0}" != 0 ]; then unset XML_OUTPUT_FILE GTEST_OUTPUT; fi; exec timeout "${TPDP_TEST_TIMEOUT_S:-600}" "$0" "$@"' \
  "$bin" "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" = 77 ]; then
  reason=$(sed -n 's/^multihost: skipped: //p' "$out" | head -n 1)
  rm -f "$out"
  echo "SKIPPED: $reason"
  [ -n "${XML_OUTPUT_FILE:-}" ] || exit 0
  python3 - "$bin" "$reason" "$XML_OUTPUT_FILE" "$@" <<'PY'
import subprocess, sys
from xml.sax.saxutils import quoteattr
binary, reason, path, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
filt = [a for a in args if a.startswith("--gtest_filter")]
try:  # the binary's cases, each reported skipped
    listing = subprocess.run([binary, "--gtest_list_tests"] + filt,
                             capture_output=True, text=True,
                             timeout=60).stdout
except (OSError, subprocess.SubprocessError):
    listing = ""
cases, suite = [], ""
for line in listing.splitlines():
    if not line.startswith(" "):
        suite = line.strip().rstrip(".")
    elif line.strip():
        cases.append((suite, line.split()[0]))
with open(path, "w") as f:
    f.write('<?xml version="1.0"?>\n<testsuites>\n<testsuite name="multihost">\n')
    for s, c in cases or [("Multihost", "Skipped")]:
        f.write('<testcase classname=%s name=%s result="skipped">'
                '<skipped message=%s/></testcase>\n'
                % (quoteattr(s), quoteattr(c), quoteattr(reason)))
    f.write('</testsuite>\n</testsuites>\n')
PY
  exit 0
fi
rm -f "$out"
# scripts/summarize-tests looks for this line (see tests/mpirun_test.sh).
if [ "$rc" != 0 ]; then echo "tpdp-test: mpirun exited with code $rc"; fi
exit "$rc"
