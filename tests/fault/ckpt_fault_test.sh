#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# A rank SIGKILLed in the middle of a checkpoint save (fault_helper's
# FAULT=kill:RANK:0:DELAY_MS, a thread of the helper, not the library's
# TPDP_CKPT_TEST_KILL hook): the job ends at once with a non-zero exit and
# mpirun naming the rank; the directory still loads a complete checkpoint
# (the previous one, or the new one if the kill came after its commit)
# with every value right; the next save commits and leaves no file of the
# killed save behind.
#   ckpt_fault_test.sh HELPER
set -u
helper=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export TPDP_TIMEOUT_S=${TPDP_TIMEOUT_S:-5}
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/ckpt_fault.XXXXXX")
fail=0
run() { # np, then fault_helper's arguments; 60 s at most
  local np=$1
  shift
  timeout -k 10 60 mpirun -np "$np" --oversubscribe --bind-to none \
    --mca mpi_yield_when_idle 1 "$helper" "$@" 2>&1
}
expect() { # what, expected exit (0 or nonzero), command...
  local what=$1 want=$2
  shift 2
  out=$("$@")
  rc=$?
  if { [ "$want" = 0 ] && [ $rc = 0 ]; } ||
     { [ "$want" != 0 ] && [ $rc != 0 ] && [ $rc != 124 ]; }; then
    echo "ok: $what"
  else
    echo "FAILED: $what (exit $rc)"
    echo "$out" | tail -15
    fail=1
  fi
}
killed_save() { # the save of checkpoint 2 with FAULT=$1
  FAULT=$1 run 2 save "$dir" 2
}
expect "save checkpoint 1" 0 run 2 save "$dir" 1
for fault in kill:1:0:5 kill:0:0:20; do
  t0=$(date +%s)
  expect "save of checkpoint 2 with FAULT=$fault fails" 1 killed_save "$fault"
  echo "  ended after $(($(date +%s) - t0)) s; left: $(cd "$dir" && ls | tr '\n' ' ')"
  rank=${fault#kill:}
  rank=${rank%%:*}
  for pat in "rank $rank: SIGKILL during tpdp_checkpoint_save" \
             "process rank $rank .*signal 9"; do
    if echo "$out" | grep -Eq -- "$pat"; then
      echo "ok: output has /$pat/"
    else
      echo "FAILED: no line of the output matches /$pat/"
      fail=1
    fi
  done
  # A complete checkpoint loads: 1, or 2 when the kill came after its
  # commit (index.json renamed); never a mix.
  if out1=$(run 2 check "$dir" 1); then
    echo "ok: checkpoint 1 loads after FAULT=$fault"
  elif out2=$(run 2 check "$dir" 2); then
    echo "ok: checkpoint 2 loads after FAULT=$fault (killed after its commit)"
  else
    echo "FAILED: neither checkpoint 1 nor 2 loads after FAULT=$fault"
    echo "$out1" | tail -5
    echo "$out2" | tail -5
    fail=1
  fi
done
expect "save checkpoint 3" 0 run 2 save "$dir" 3
expect "checkpoint 3 loads" 0 run 2 check "$dir" 3
left=$(cd "$dir" && ls | tr '\n' ' ')
if echo "$left" | grep -Eq '^index\.json model-g[0-9]+-00001-of-00002\.safetensors model-g[0-9]+-00002-of-00002\.safetensors $'; then
  echo "ok: only checkpoint 3's files are left: $left"
else
  echo "FAILED: the directory holds '$left', expected index.json and two data files"
  fail=1
fi
rm -rf "$dir"
exit $fail
