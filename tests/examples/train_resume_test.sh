#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Resume equivalence of train_mlp: an uninterrupted 10-step run on dp=2,tp=2
# against a run saved after step 5 (--steps 6 --save-every 3 --save DIR)
# and resumed with --load DIR --steps 10 on dp=1,tp=4, on dp=4,tp=1 and on
# one process: each resumed run must print steps 6..9 with the losses of
# the uninterrupted run (within 1e-4), and pass its own --check against a
# one-process reference trained from scratch. The hidden size 30 shards
# unevenly over 4. A model flag that contradicts the checkpoint is refused.
# Fully sharded units: the same checkpoint resumed at --zero 3 on dp=4, and
# one saved at --zero 2 on dp=2,tp=2 (the shards as boxes) resumed at
# --zero 0 on dp=1,tp=4 and at --zero 1 on dp=2,tp=2.
set -u
bin="$1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir="${TEST_TMPDIR:-/tmp}/resume.$$"
rm -rf "$dir"
model="--layers 2 --hidden 30 --width 12 --inputs 8 --classes 5 --batch 16 --lr 0.01 --seed 7"
run() { # np, then train_mlp's arguments
  local np=$1
  shift
  mpirun -np "$np" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
    --timeout 300 "$bin" --bucket-mib 0.001 "$@" 2>&1
}
fail=0
full=$(run 4 --dp 2 --tp 2 $model --steps 10) || { echo "$full" | tail; exit 1; }
out=$(run 4 --dp 2 --tp 2 $model --steps 6 --save-every 3 --save "$dir")
echo "$out" | grep '^checkpoint'
echo "$out" | grep -q "checkpoint: step 6 saved" || { echo "FAILED: save"; echo "$out" | tail; exit 1; }
compare() { # name, np, flags...
  local name=$1 np=$2
  shift 2
  out=$(run "$np" "$@" --steps 10 --load "${src:-$dir}" --check)
  rc=$?
  got=$(echo "$out" | grep '^step ')
  want=$(echo "$full" | grep '^step ' | awk '$2 >= 6')
  if [ $rc != 0 ] || [ "$(echo "$got" | awk '{print $2}' | tr '\n' ' ')" != "6 7 8 9 " ]; then
    echo "FAILED: $name (exit $rc)"
    echo "$out" | tail -20
    fail=1
    return
  fi
  worst=$(paste <(echo "$want") <(echo "$got") | awk '
    { d = $4 - $8; if (d < 0) d = -d; m = $4 < 0 ? -$4 : $4; if (m < 1) m = 1;
      r = d / m; if (r > w) w = r }
    END { printf "%.3e", w }')
  if awk -v w="$worst" 'BEGIN { exit !(w <= 1e-4) }'; then
    echo "ok: $name: steps 6..9 match the uninterrupted run (max rel diff $worst); $(echo "$out" | grep '^check:' | head -1)"
  else
    echo "FAILED: $name: max rel diff $worst"
    paste <(echo "$want") <(echo "$got")
    fail=1
  fi
}
compare "dp=2,tp=2 -> dp=1,tp=4" 4 --dp 1 --tp 4
compare "dp=2,tp=2 -> dp=4,tp=1" 4 --dp 4 --tp 1
compare "4 processes -> 1 process" 1 --dp 1 --tp 1
compare "dp=2,tp=2 -> dp=4,tp=1 --zero 3" 4 --dp 4 --tp 1 --zero 3
out=$(run 4 --dp 2 --tp 2 $model --steps 6 --save "$dir.z2" --zero 2)
echo "$out" | grep -q "checkpoint: step 6 saved" || { echo "FAILED: save at --zero 2"; echo "$out" | tail; fail=1; }
src="$dir.z2" compare "--zero 2 dp=2,tp=2 -> --zero 0 dp=1,tp=4" 4 --dp 1 --tp 4
src="$dir.z2" compare "--zero 2 dp=2,tp=2 -> --zero 1 dp=2,tp=2" 4 --dp 2 --tp 2 --zero 1
out=$(run 1 --load "$dir" --steps 10 --hidden 31)
if [ $? = 2 ] && echo "$out" | grep -q -- "--hidden 31 conflicts with the checkpoint"; then
  echo "ok: a contradicting model flag is refused"
else
  echo "FAILED: contradicting flag"
  echo "$out" | tail -5
  fail=1
fi
rm -rf "$dir" "$dir.z2"
exit $fail
