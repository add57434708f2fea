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
# Bazel's settings: see bench/common.sh.
set -euo pipefail
. "$(dirname "$0")/common.sh"
bench_build //bench:hooks_bench
echo "bench/hooks: hooks_bench $*"
"$bench_bin/bench/hooks_bench" "$@"
