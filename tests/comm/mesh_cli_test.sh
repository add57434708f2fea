#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# `tpdp mesh` (no MPI launch) and the 4-rank mesh demo.
# Usage: mesh_cli_test.sh TPDP_BIN MESH_DEMO_BIN
set -u
tpdp="$1"
demo="$2"
fail=0
check() {  # name, expected, actual
  if [ "$2" != "$3" ]; then
    echo "FAIL $1"; echo "--- expected"; echo "$2"; echo "--- actual"; echo "$3"; fail=1
  else
    echo "ok   $1"
  fi
}

# A 2x3 (dp, tp) mesh worked out by hand: rank = dp * 3 + tp.
out=$("$tpdp" mesh --mesh dp=2,tp=3 --json | tr -d ' \n')
check "json 2x3" '{"mesh":"dp=2,tp=3","size":6,"dims":[{"name":"dp","size":2,"groups":[[0,3],[1,4],[2,5]]},{"name":"tp","size":3,"groups":[[0,1,2],[3,4,5]]}],"ranks":[{"rank":0,"coords":[0,0]},{"rank":1,"coords":[0,1]},{"rank":2,"coords":[0,2]},{"rank":3,"coords":[1,0]},{"rank":4,"coords":[1,1]},{"rank":5,"coords":[1,2]}]}' "$out"

# Plain output names each group of each dim.
out=$("$tpdp" mesh --mesh dp=2,tp=2)
echo "$out" | grep -q "dp (size 2, 2 groups): {0,2} {1,3}" || { echo "FAIL plain dp groups"; fail=1; }
echo "$out" | grep -q "tp (size 2, 2 groups): {0,1} {2,3}" || { echo "FAIL plain tp groups"; fail=1; }

# Bad specs: exit 2 with the culprit named.
for spec in "dp=2,dp=2:dp" "dp=0:dp" "=2:empty" "dp=x:dp"; do
  arg=${spec%%:*}
  want=${spec#*:}
  err=$("$tpdp" mesh --mesh "$arg" 2>&1 >/dev/null)
  rc=$?
  if [ $rc != 2 ] || ! echo "$err" | grep -q "$want"; then
    echo "FAIL bad spec '$arg': rc=$rc, message: $err"; fail=1
  else
    echo "ok   bad spec '$arg'"
  fi
done

# The demo runs every collective on every dim of a 2x2 mesh and checks them.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mpirun -np 4 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
      --timeout 300 "$demo" --mesh dp=2,tp=2 --count 1003 --iters 2 2>&1)
rc=$?
if [ $rc != 0 ] || ! echo "$out" | grep -q "^mesh_demo: ok"; then
  echo "FAIL mesh_demo rc=$rc"; echo "$out" | tail -20; fail=1
else
  echo "ok   mesh_demo"
fi
exit $fail
