#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Times allreduce, allgather and reduce_scatter through tpdp_comm against
# the raw MPI calls on the same buffers, 1 KiB to 256 MiB, on 2 ranks.
# Prints a table and, last, "comm: ratio <min over sizes >= 1 MiB of
# raw_time / tpdp_time>" (target >= 0.95).
#
#   bench/comm.sh [comm_bench options: --min-bytes B --max-bytes B --rounds R]
#
# Environment (and Bazel's settings: see bench/common.sh):
#   NP                  ranks (default 2)
#   MPIRUN_FLAGS        extra mpirun options (default: --bind-to none)
set -euo pipefail
. "$(dirname "$0")/common.sh"
bench_build //bench:comm_bench
export OMPI_MCA_rmaps_base_oversubscribe=1
# shellcheck disable=SC2086 # MPIRUN_FLAGS are words
exec mpirun -np "${NP:-2}" --oversubscribe ${MPIRUN_FLAGS:---bind-to none} \
  "$bench_bin/bench/comm_bench" "$@"
