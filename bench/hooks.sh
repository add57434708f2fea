#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Steady-state cost of the TP+DP transform's forward hooks
# (tp/dp_transform.c): a tree of 1,000 DTensor parameters over 50 nested
# modules; one step = reconstruct (pre-forward hook) + localize (forward
# hook). Prints the seed-004-style baseline
# (tree walk + names per call) measured in the same run, the ratio, and last
# `hooks: <ns per parameter> ns/param, <n> allocations per step`
# (targets: <= 50 ns/param, 0 allocations; allocations counted by wrapping
# malloc/calloc/realloc during the timed loop only). Single process, no MPI.
# Usage: bench/hooks.sh [--steps N]
# BAZEL_OUTPUT_BASE, if set, is passed to bazel as --output_base.
set -euo pipefail
cd "$(dirname "$0")/.."
ob=()
[ -n "${BAZEL_OUTPUT_BASE:-}" ] && ob=(--output_base="$BAZEL_OUTPUT_BASE")
bazel "${ob[@]}" build -c opt //bench:hooks_bench >/dev/null 2>&1 ||
  bazel "${ob[@]}" build -c opt //bench:hooks_bench
bin=$(bazel "${ob[@]}" info -c opt bazel-bin 2>/dev/null)/bench/hooks_bench
echo "bench/hooks: hooks_bench $*"
"$bin" "$@"
