#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Times allreduce, allgather and reduce_scatter through tpdp_comm against
# the raw MPI calls on the same buffers, 1 KiB to 256 MiB, on 2 ranks.
# Prints a table and, last, "comm: ratio <min over sizes >= 1 MiB of
# raw_time / tpdp_time>" (target >= 0.95).
#
#   bench/comm.sh [comm_bench options: --min-bytes B --max-bytes B --rounds R]
#
# Environment:
#   BAZEL               bazel command (default: bazel)
#   BAZEL_STARTUP_FLAGS startup options, e.g. --output_base=/tmp/ob
#   BAZEL_FLAGS         build options (default: -c opt)
#   NP                  ranks (default 2)
#   MPIRUN_FLAGS        extra mpirun options (default: --bind-to none)
set -euo pipefail
cd "$(dirname "$0")/.."
BAZEL="${BAZEL:-bazel}"
startup=(${BAZEL_STARTUP_FLAGS:-})
flags=(${BAZEL_FLAGS:--c opt})
"$BAZEL" "${startup[@]}" build "${flags[@]}" //bench:comm_bench >&2
bin="$("$BAZEL" "${startup[@]}" info "${flags[@]}" bazel-bin 2>/dev/null)/bench/comm_bench"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
exec mpirun -np "${NP:-2}" --oversubscribe ${MPIRUN_FLAGS:---bind-to none} \
  "$bin" "$@"
