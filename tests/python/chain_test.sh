#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# A tests/python pytest file run in phases on different rank counts, one
# after the other, sharing $TPDP_TEST_DIR (tpdp_pytest_chain in
# pytest.bzl):
#   chain_test.sh PYTEST_RANK LIBTPDP TEST.py [VAR=VALUE...] -- PHASE NP ...
# Each phase runs tests/mpirun_test.sh NP PYTEST_RANK LIBTPDP TEST.py with
# TPDP_TEST_PHASE=PHASE; the phases' JUnit files are merged into Bazel's
# XML_OUTPUT_FILE (each case named after its phase). A failing phase ends
# the chain.
set -u
rank_sh="$1" lib="$2" test="$3"
shift 3
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  export "${1?}"
  shift
done
shift
here="$(pwd)"
export TPDP_TEST_DIR="${TEST_TMPDIR:-$(mktemp -d)}/chain"
rm -rf "$TPDP_TEST_DIR" && mkdir -p "$TPDP_TEST_DIR"
final_xml="${XML_OUTPUT_FILE:-}"
xmls=()
rc=0
while [ $# -gt 1 ]; do
  phase="$1" np="$2"
  shift 2
  echo "chain_test.sh: phase $phase on $np ranks"
  xml="$TPDP_TEST_DIR/$phase.xml"
  XML_OUTPUT_FILE="$xml" TPDP_TEST_PHASE="$phase" \
    bash "$here/tests/mpirun_test.sh" "$np" "$rank_sh" "$lib" "$test"
  rc=$?
  [ -f "$xml" ] && xmls+=("$phase=$xml")
  [ $rc = 0 ] || break
done
if [ -n "$final_xml" ] && [ ${#xmls[@]} -gt 0 ]; then
  /usr/bin/python3 - "$final_xml" "${xmls[@]}" <<'PY'
import sys
import xml.etree.ElementTree as ET
out = ET.Element("testsuites")
for arg in sys.argv[2:]:
    phase, path = arg.split("=", 1)
    for suite in ET.parse(path).getroot().iter("testsuite"):
        suite.set("name", "%s[%s]" % (suite.get("name", "pytest"), phase))
        for case in suite.iter("testcase"):
            case.set("name", "%s[%s]" % (case.get("name"), phase))
        out.append(suite)
ET.ElementTree(out).write(sys.argv[1], encoding="utf-8",
                          xml_declaration=True)
PY
fi
exit $rc
