#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs each fuzz target (arguments: their paths) once on every file of its
# corpus folder, tests/fuzz/corpus/<target>/. Fails on a crash or a
# sanitizer report (under --config=asan).
set -u
dir="$(dirname "$0")/corpus"
[ -d "$dir" ] || dir="$TEST_SRCDIR/tpdp/tests/fuzz/corpus"
fail=0
for bin in "$@"; do
  name=$(basename "$bin")
  files=("$dir/$name"/*)
  if [ ! -e "${files[0]}" ]; then
    echo "corpus_test: $name has no corpus"; fail=1; continue
  fi
  if "$bin" "${files[@]}" >/dev/null 2>"$TEST_TMPDIR/$name.err"; then
    echo "corpus_test: $name: ${#files[@]} inputs ok"
  else
    echo "corpus_test: $name FAILED:"; tail -20 "$TEST_TMPDIR/$name.err"; fail=1
  fi
done
exit $fail
