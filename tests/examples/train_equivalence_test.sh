#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Equivalence of TP+DP training with one process: for each (dp, tp) mesh,
# train_mlp --check trains 10 steps distributed and the same model in one
# process on rank 0, and fails if the losses or the gathered parameters
# differ by more than 1e-4. The hidden size (fc1 width) 30 does not divide
# by 4, so tp=4 shards unevenly (8, 8, 8, 6). Writes one <testcase> per mesh
# into Bazel's XML result so each counts as a test.
set -u
bin="$1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
pass=0
fail=0
cases=""
for mesh in "1 1" "2 1" "1 2" "2 2" "1 4" "4 1"; do
  set -- $mesh
  dp=$1 tp=$2
  name="dp${dp}_tp${tp}"
  start=$(date +%s.%N)
  out=$(mpirun -np $((dp * tp)) --oversubscribe --bind-to none \
        --mca mpi_yield_when_idle 1 --timeout 300 \
        "$bin" --dp "$dp" --tp "$tp" --layers 2 --hidden 30 --width 12 \
        --inputs 8 --classes 5 --batch 16 --steps 10 --lr 0.01 --seed 7 \
        --bucket-mib 0.001 --check 2>&1)
  rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc 2>/dev/null || echo 0)
  line=$(echo "$out" | grep '^check:' | head -1)
  echo "[$name] rc=$rc $line"
  if [ $rc = 0 ] && echo "$out" | grep -q '^check: ok'; then
    pass=$((pass + 1))
    cases="$cases<testcase classname=\"TrainEquivalence\" name=\"$name\" status=\"run\" result=\"completed\" time=\"$secs\"/>"
  else
    fail=$((fail + 1))
    echo "$out" | tail -30
    msg=$(echo "$line rc=$rc" | sed 's/[<>&"]/_/g')
    cases="$cases<testcase classname=\"TrainEquivalence\" name=\"$name\" status=\"run\" result=\"completed\" time=\"$secs\"><failure message=\"$msg\"/></testcase>"
  fi
done
if [ -n "${XML_OUTPUT_FILE:-}" ]; then
  printf '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites tests="%d" failures="%d"><testsuite name="TrainEquivalence" tests="%d" failures="%d">%s</testsuite></testsuites>\n' \
    $((pass + fail)) $fail $((pass + fail)) $fail "$cases" > "$XML_OUTPUT_FILE"
fi
echo "train equivalence: $pass passed, $fail failed"
[ $fail = 0 ]
