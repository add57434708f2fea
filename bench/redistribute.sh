#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tpdp_redistribute against raw MPI collectives on 4 CPU ranks, 64 MiB f32:
# prints per-case timings and the ratio raw/tpdp (1.0 = no overhead) for
# S(0)->R (allgather), P->S(0) (reduce_scatter) and S(1)->R (packs), and
# last `redistribute: ratio <min of S(0)->R and P->S(0)>` (target >= 0.9).
# Usage: bench/redistribute.sh [--mib N] [--rounds N]
# Bazel's settings: see bench/common.sh.
set -euo pipefail
. "$(dirname "$0")/common.sh"
bench_build //bench:redistribute_bench
echo "bench/redistribute: mpirun -np 4 redistribute_bench $*"
"${bench_mpirun[@]}" -np 4 "$bench_bin/bench/redistribute_bench" "$@"
