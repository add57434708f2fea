#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# A save SIGKILLed at any point leaves the previous checkpoint of the
# directory loading and verifying. crash_helper saves checkpoint 1 on 2
# ranks; then saves of checkpoint 2 are killed (TPDP_CKPT_TEST_KILL, the
# library's test hook) on rank 1 in the middle of its data, on rank 1 after
# its file is renamed into place, and on rank 0 with index.json.tmp written
# but not renamed; after each, checkpoint 1 loads on 2 ranks and on 1 rank
# with every value and checksum right. A last save commits checkpoint 3
# and removes the killed saves' files.
set -u
bin="$1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir="${TEST_TMPDIR:-/tmp}/crash.$$"
rm -rf "$dir"
fail=0
run() { # np, then crash_helper's arguments
  local np=$1
  shift
  mpirun -np "$np" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
    --timeout 120 "$bin" "$@"
}
check() { # what, expected exit (0 or nonzero), command...
  local what=$1 want=$2
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  if { [ "$want" = 0 ] && [ $rc = 0 ]; } || { [ "$want" != 0 ] && [ $rc != 0 ]; }; then
    echo "ok: $what"
  else
    echo "FAILED: $what (exit $rc)"
    echo "$out" | tail -15
    fail=1
  fi
}
killed_save() { # the save of checkpoint 2, with the kill hook at $1
  TPDP_CKPT_TEST_KILL=$1 run 2 save "$dir" 2
}
check "save checkpoint 1" 0 run 2 save "$dir" 1
for point in 1:data 1:file 0:index; do
  check "save of checkpoint 2 killed at $point" 1 killed_save "$point"
  echo "  left: $(cd "$dir" && ls | tr '\n' ' ')"
  check "checkpoint 1 loads on 2 ranks after a kill at $point" 0 run 2 check "$dir" 1
  check "checkpoint 1 loads on 1 rank after a kill at $point" 0 run 1 check "$dir" 1
done
check "save checkpoint 3" 0 run 2 save "$dir" 3
check "checkpoint 3 loads" 0 run 1 check "$dir" 3
left=$(cd "$dir" && ls | tr '\n' ' ')
want="index.json model-g000005-00001-of-00002.safetensors model-g000005-00002-of-00002.safetensors "
if [ "$left" = "$want" ]; then
  echo "ok: stale files removed"
else
  echo "FAILED: the directory holds '$left', expected '$want'"
  fail=1
fi
rm -rf "$dir"
exit $fail
