#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The fault tests: runs fault_helper on NP ranks with FAULT set, under an
# outer time limit, and checks that the job ended (a hang fails the test,
# not CI), with a non-zero exit, printing every expected pattern (grep -E),
# and that no rank is left running afterwards.
#   fault_test.sh HELPER TEST
# TPDP_TIMEOUT_S is 5 unless the environment sets it.
set -u
helper=$1 test=$2
# TEST: ranks, helper mode, FAULT (see fault_helper.cc), outer limit (s),
# then the patterns the output must have.
case $test in
  # SIGKILL in the middle of an allreduce: mpirun notices, names the rank.
  allreduce_kill) set -- 2 allreduce kill:1:3:2 60 \
    "rank 1: SIGKILL during tpdp_allreduce" "process rank 1 .*signal 9" ;;
  # ... of the ring allreduce AVG.
  ring_kill) set -- 2 ring kill:1:3:2 60 \
    "rank 1: SIGKILL during tpdp_allreduce \(avg, ring\)" \
    "process rank 1 .*signal 9" ;;
  # ... of the reducer's finalize (its communication thread reducing).
  reducer_kill) set -- 2 reducer kill:1:3:1 60 \
    "rank 1: SIGKILL during tpdp_reducer_finalize" "process rank 1 .*signal 9" ;;
  # SIGSTOP of rank 1 before its dp allreduce on a dp=2,tp=2 mesh: the
  # watchdogs of its peers name it (not arrived, not responding) and abort:
  # rank 3 (its dp peer) blocked on 'mesh.dp', rank 0 (its tp peer) on
  # 'mesh.tp'. Rank 2 waits for rank 3 on 'mesh.tp' and would name rank 3
  # (in its dp allreduce), not rank 1: it waits 3 times longer
  # (slow_ranks), so that on a loaded machine its report never comes
  # first, as for `skip`.
  stop) slow_ranks="2"; set -- 4 allreduce stop:1:3 90 \
    "\[rank (0|3)\] tpdp ERROR: tpdp_allreduce timed out after [0-9]+ s \(TPDP_TIMEOUT_S=[0-9]+\): allreduce f32 x 1048576 #[0-9]+ on communicator 'mesh\.(dp|tp)' \(mesh dim (dp|tp)\)" \
    "Not arrived: rank 1 .*has not arrived and is not responding \\(stopped or hung" ;;
  # SIGSTOP in the middle of the ring: rank 1 arrived, then stalled.
  ring_stop) set -- 2 ring stop:1:3:2 90 \
    "tpdp_allreduce timed out after [0-9]+ s" \
    "Not arrived: rank 1 .*not responding" ;;
  # Rank 1 calls a barrier where rank 0 calls its allreduce. Rank 1 waits
  # 3 times longer, so that rank 0's report is the first (on a loaded
  # machine rank 1's watchdog could fire first and abort the job).
  skip) slow_ranks="1"; set -- 2 allreduce skip:1:3 90 \
    "\[rank 0\] tpdp ERROR: tpdp_allreduce timed out .*: allreduce f32 x 1048576 #4 on communicator 'world'" \
    "rank 1 called barrier #4 instead" ;;
  # Rank 1 never marks a parameter (find_unused_parameters off): it gets
  # the error; rank 0, blocked in its finalize, times out naming it.
  unmarked) set -- 2 reducer unmark:1:2 90 \
    "rank 1: tpdp_reducer_finalize failed: .*never marked ready" \
    "tpdp_allreduce \(on the reducer's communication thread\) timed out" \
    "Not arrived: rank 1 has not arrived: it is in tpdp_finalize" ;;
  # SIGSTOP of rank 1 before a fully sharded unit's forward: rank 0,
  # blocked in that unit's all-gather, times out naming the unit and rank 1.
  fsdp_stop) set -- 2 fsdp stop:1:3 90 \
    "\[rank 0\] tpdp ERROR: tpdp_module_forward_begin \(on the fully sharded unit blocks\.1\[Block\]\) timed out after [0-9]+ s \(TPDP_TIMEOUT_S=[0-9]+\): allgather f32 x 524288 #[0-9]+ on communicator 'world'" \
    "Not arrived: rank 1 .*not responding" ;;
  # Across 2 simulated hosts x 2 ranks (run by multihost_fault_test.sh
  # inside scripts/multihost): rank 3, on the second host, stopped before
  # its allreduce on a dp=2,tp=2 mesh (tp inside each host, dp across).
  # Ranks 0 and 2 wait 3 times longer (slow_ranks), so that the first
  # report is rank 1's, on host 0, blocked on 'mesh.dp' with rank 3: it
  # names rank 3 and its host from the copies of the board the hosts
  # exchange, not from shared memory.
  stop_remote) slow_ranks="0 2"; set -- 4 allreduce stop:3:3 90 \
    "\[rank 1\] tpdp ERROR: tpdp_allreduce timed out after [0-9]+ s \(TPDP_TIMEOUT_S=[0-9]+\): allreduce f32 x 1048576 #[0-9]+ on communicator 'mesh\.dp'" \
    "Not arrived: rank 3 on host tpdp-host1 \(rank 1 of 'mesh.dp'\) has not arrived and is not responding \(stopped or hung: no sign of life for [0-9]+ s, as of its last report from its host\)" ;;
  # ... killed instead: mpirun names the rank and its host.
  kill_remote) set -- 4 allreduce kill:3:3:2 60 \
    "rank 3: SIGKILL during tpdp_allreduce" \
    "process rank 3 .*on node tpdp-host1 .*signal 9" ;;
  *) echo "fault_test: unknown test '$test'" >&2; exit 2 ;;
esac
np=$1 mode=$2 fault=$3 limit=$4
slow_ranks=${slow_ranks:-}
shift 4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export TPDP_TIMEOUT_S=${TPDP_TIMEOUT_S:-5}
# The world ranks in $slow_ranks run with 3 x TPDP_TIMEOUT_S.
export FAULT_SLOW_RANKS=" $slow_ranks " FAULT_SLOW_TIMEOUT_S=$((3 * TPDP_TIMEOUT_S))
export FAULT=$fault
export FAULT_PID_DIR=$(mktemp -d "${TEST_TMPDIR:-/tmp}/fault.XXXXXX")
t0=$(date +%s)
# -k: mpirun itself gets SIGKILL if SIGTERM does not end it.
# Inside scripts/multihost, its mpirun across the simulated hosts.
mpirun=${TPDP_MULTIHOST_MPIRUN:-mpirun}
# shellcheck disable=SC2086
out=$(timeout -k 10 "$limit" $mpirun -np "$np" --oversubscribe --bind-to none \
  --mca mpi_yield_when_idle 1 bash -c 'case "$FAULT_SLOW_RANKS" in
    *" $OMPI_COMM_WORLD_RANK "*) export TPDP_TIMEOUT_S=$FAULT_SLOW_TIMEOUT_S ;;
  esac; exec "$0" "$@"' "$helper" "$mode" 2>&1)
rc=$?
elapsed=$(($(date +%s) - t0))
fail=0
echo "$out" | tail -40
echo "fault_test: $mode with FAULT=$fault on $np ranks: exit $rc after ${elapsed} s (TPDP_TIMEOUT_S=$TPDP_TIMEOUT_S, limit $limit s)"
# timeout: 124, or 137 after its -k (a rank killed by SIGKILL also makes
# mpirun exit 137, early).
if [ $rc = 124 ] || { [ $rc = 137 ] && [ "$elapsed" -ge "$limit" ]; }; then
  echo "FAILED: the job hung: still running after $limit s"
  fail=1
elif [ $rc = 0 ]; then
  echo "FAILED: the job exited 0 despite the fault"
  fail=1
fi
# The bound (issue 13 and 23): the job ends within TPDP_TIMEOUT_S +
# 30 s of the fault (which strikes within the first seconds).
if [ "$elapsed" -gt $((TPDP_TIMEOUT_S + 30)) ]; then
  echo "FAILED: the job took ${elapsed} s, more than TPDP_TIMEOUT_S + 30 s"
  fail=1
fi
for pat in "$@"; do
  if echo "$out" | grep -Eq -- "$pat"; then
    echo "ok: output has /$pat/"
  else
    echo "FAILED: no line of the output matches /$pat/"
    fail=1
  fi
done
# A rank left behind: a stopped one is not killed by everyone (SIGTERM
# waits for SIGCONT); kill it so that it cannot outlive the test.
sleep 1
for f in "$FAULT_PID_DIR"/rank.*; do
  [ -e "$f" ] || continue
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null && grep -q fault_helper "/proc/$pid/cmdline" 2>/dev/null; then
    state=$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    echo "note: ${f##*/} (pid $pid, state $state) outlived mpirun: killed"
    kill -KILL "$pid" 2>/dev/null
    [ "$state" = T ] || fail=1 # only the rank stopped on purpose may be left
  fi
done
rm -rf "$FAULT_PID_DIR"
exit $fail
