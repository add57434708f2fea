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
# A library built with --config=asan needs the sanitizers' runtimes loaded
# first: preload them into python (this rank's process only). conftest.py
# checks that they are mapped (TPDP_TEST_PRELOADED), so that a
# use-after-free in C reached from Python fails the test rather than
# passing by luck.
pre=
for n in $(readelf -d "$TPDP_LIB" 2>/dev/null |
           sed -n 's/.*NEEDED.*\[\(libasan\.so[.0-9]*\|libubsan\.so[.0-9]*\)\]/\1/p'); do
  path=$(ldconfig -p | awk -v n="$n" '$1 == n {print $NF; exit}')
  if [ -z "$path" ]; then
    echo "pytest_rank.sh: $TPDP_LIB needs $n, which ldconfig does not know" >&2
    exit 1
  fi
  pre="$pre $path"
done
here="$(pwd)"
export PYTHONPATH="$here/python${PYTHONPATH:+:$PYTHONPATH}"
for py in "${TPDP_TORCH_PYTHON:-}" /usr/bin/python3 python3; do
  [ -n "$py" ] || continue
  # Whether torch and pytest are there is asked without the sanitizers: a
  # Python that fails only under them fails the test, it is not skipped.
  if env -u LD_PRELOAD "$py" -c "import torch, pytest" >/dev/null 2>&1; then
    if [ -n "$pre" ]; then
      export LD_PRELOAD="${pre# }${LD_PRELOAD:+ $LD_PRELOAD}"
      export TPDP_TEST_PRELOADED="${pre# }"
    fi
    # --capture=sys: what C writes to fd 2 (a sanitizer report) reaches the
    # log even when the process dies before pytest would print it.
    "$py" -m pytest -q --color=no -p no:cacheprovider --capture=sys -rs "$test" \
      ${XML_OUTPUT_FILE:+--junitxml="$XML_OUTPUT_FILE"}
    rc=$?
    # 5: no test ran (all skipped at collection); the XML says why
    [ $rc = 5 ] && rc=0
    exit $rc
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
