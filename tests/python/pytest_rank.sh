#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# One rank of a tests/python pytest file: pytest_rank.sh LIBTPDP_SO TEST.py
# (run by tests/mpirun_test.sh N pytest_rank.sh ...). Loads the Bazel-built
# libtpdp.so (TPDP_LIB) and the package from python/. Uses a Python that
# has torch and pytest (Debian's /usr/bin/python3 may not be first on
# PATH); without one, writes Bazel's XML with the case skipped and the
# reason. Only the rank that has XML_OUTPUT_FILE (rank 0) writes XML.
set -u
export TPDP_LIB="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
test="$2"
here="$(pwd)"
export PYTHONPATH="$here/python${PYTHONPATH:+:$PYTHONPATH}"
for py in "${TPDP_TORCH_PYTHON:-}" /usr/bin/python3 python3; do
  [ -n "$py" ] || continue
  if "$py" -c "import torch, pytest" >/dev/null 2>&1; then
    exec "$py" -m pytest -q --color=no -p no:cacheprovider -rs "$test" \
      ${XML_OUTPUT_FILE:+--junitxml="$XML_OUTPUT_FILE"}
  fi
done
reason="PyTorch or pytest is not installed (bash scripts/install-deps --bench)"
echo "SKIPPED: $test: $reason"
if [ -n "${XML_OUTPUT_FILE:-}" ]; then
  cat >"$XML_OUTPUT_FILE" <<XML
<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="$(basename "$test")" tests="1" skipped="1">
<testcase name="$(basename "$test")"><skipped message="$reason"/></testcase>
</testsuite></testsuites>
XML
fi
exit 0
