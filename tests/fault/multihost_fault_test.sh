#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# A fault test of fault_test.sh across 2 simulated hosts x 2 ranks
# (scripts/multihost --no-mpirun: fault_test.sh runs inside host 0 and
# launches its job with $TPDP_MULTIHOST_MPIRUN). Where the hosts cannot be
# made, the test reports skipped with the reason.
#   multihost_fault_test.sh HELPER TEST
set -u
here="$(cd "$(dirname "$0")" && pwd)"
helper="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
out=$(mktemp)
"$here/../../scripts/multihost" --hosts 2 --ranks-per-host 2 --no-mpirun -- \
  bash "$here/fault_test.sh" "$helper" "$2" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" = 77 ]; then
  reason=$(sed -n 's/^multihost: skipped: //p' "$out" | head -n 1)
  echo "SKIPPED: $reason"
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    python3 - "$2" "$reason" "$XML_OUTPUT_FILE" <<'PY'
import sys
from xml.sax.saxutils import quoteattr
name, reason, path = sys.argv[1:4]
with open(path, "w") as f:
    f.write('<?xml version="1.0"?>\n<testsuites><testsuite name="fault">'
            '<testcase classname="MultihostFault" name=%s result="skipped">'
            '<skipped message=%s/></testcase></testsuite></testsuites>\n'
            % (quoteattr(name), quoteattr(reason)))
PY
  fi
  rc=0
fi
rm -f "$out"
exit "$rc"
