#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The DP reducer across 2 simulated hosts x 2 ranks (scripts/multihost:
# shared memory within a host, TCP over a veth pair across): 25M f32
# parameters in 100 tensors of 250k, bucket cap 25 MiB, 100 MB of
# gradients per step, in one run (reducer_bench multihost):
#   raw:  blocking MPI_Allreduce over the same buckets' bytes, 4 ranks
#   hier: the reducer, shared-memory buckets, hierarchical across hosts
#   flat: the reducer made with TPDP_SHM=0 (buckets through MPI alone)
# Last line: "multihost: reducer_ratio <raw/hier> flat_ratio <raw/flat>"
# (target: reducer_ratio >= 1.5). Where the hosts cannot be made (not root,
# no namespaces) it prints "multihost: skipped: <reason>" and exits 0.
# Usage: bench/multihost.sh [--steps N]   (default 10)
# BAZEL_OUTPUT_BASE, if set, is passed to bazel as --output_base.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=10
[ "${1:-}" = "--steps" ] && steps="${2:-10}"
ob=()
[ -n "${BAZEL_OUTPUT_BASE:-}" ] && ob=(--output_base="$BAZEL_OUTPUT_BASE")
bazel "${ob[@]}" build -c opt //bench:reducer_bench >/dev/null 2>&1 ||
  bazel "${ob[@]}" build -c opt //bench:reducer_bench
bin=$(bazel "${ob[@]}" info -c opt bazel-bin 2>/dev/null)/bench/reducer_bench
echo "bench/multihost: 2 hosts x 2 ranks, 100 x 250k f32, cap 25 MiB, $steps steps"
set +e
t=$(scripts/multihost --hosts 2 --ranks-per-host 2 -- "$bin" multihost --steps "$steps")
rc=$?
set -e
if [ $rc = 77 ]; then
  echo "$t" | grep '^multihost: skipped' | head -n 1
  exit 0
fi
[ $rc = 0 ] || { echo "$t"; echo "bench/multihost: the run failed (exit $rc)"; exit 1; }
field() { echo "$1" | awk -v k="$2" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}'; }
raw=$(field "$t" raw_ms); hier=$(field "$t" hier_ms); flat=$(field "$t" flat_ms)
printf '%-48s %10s\n' "measurement (median per step, max over ranks)" "ms"
printf '%-48s %10.2f\n' "raw MPI_Allreduce, $(field "$t" buckets) buckets, 4 ranks" "$raw"
printf '%-48s %10.2f\n' "tpdp reducer, hierarchical shared memory" "$hier"
printf '%-48s %10.2f\n' "tpdp reducer, flat (TPDP_SHM=0)" "$flat"
awk -v raw="$raw" -v h="$hier" -v f="$flat" \
  'BEGIN { printf "multihost: reducer_ratio %.2f flat_ratio %.2f\n", raw / h, raw / f }'
