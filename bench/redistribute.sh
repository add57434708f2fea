#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tpdp_redistribute against raw MPI collectives on 4 CPU ranks, 64 MiB f32:
# prints per-case timings and the ratio raw/tpdp (1.0 = no overhead) for
# S(0)->R (allgather), P->S(0) (reduce_scatter) and S(1)->R (packs), and
# last `redistribute: ratio <min of S(0)->R and P->S(0)>` (target >= 0.9).
# Usage: bench/redistribute.sh [--mib N] [--rounds N]
# BAZEL_OUTPUT_BASE, if set, is passed to bazel as --output_base.
set -euo pipefail
cd "$(dirname "$0")/.."
ob=()
[ -n "${BAZEL_OUTPUT_BASE:-}" ] && ob=(--output_base="$BAZEL_OUTPUT_BASE")
bazel "${ob[@]}" build -c opt //bench:redistribute_bench >/dev/null 2>&1 ||
  bazel "${ob[@]}" build -c opt //bench:redistribute_bench
bin=$(bazel "${ob[@]}" info -c opt bazel-bin 2>/dev/null)/bench/redistribute_bench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "bench/redistribute: mpirun -np 4 redistribute_bench $*"
mpirun -np 4 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
  "$bin" "$@"
