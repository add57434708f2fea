#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The DP reducer across 2 simulated hosts x 2 ranks (scripts/multihost:
# shared memory within a host, TCP over a veth pair across): 25M f32
# parameters in 100 tensors of 250k, bucket cap 25 MiB, 100 MB of
# gradients per step, in one run (reducer_bench multihost):
#   raw:  blocking MPI_Allreduce over the same buckets' bytes, 4 ranks
#   hier: the reducer, shared-memory buckets, hierarchical across hosts
#   flat: the reducer made with TPDP_SHM=0 (buckets through MPI alone)
# and the bytes that crossed hosts in one step of hier and of flat, as the
# comm layer counts them (tpdp_comm_traffic_get: a ring's schedule for
# each collective; include/tpdp/comm.h): the figure of the design that no
# load on the machine changes. Flat runs tpdp's ring over the 4 ranks
# (1.5 n from each of the 2 ranks whose neighbour is remote: 3 n across);
# hier sends each host's partial sum across once (n/2 from each of the 4
# ranks: 2 n), so the ratio should be 2/3.
# Last line: "multihost: reducer_ratio <raw/hier> flat_ratio <raw/flat>
# cross_host_bytes_ratio <hier/flat>" (target: reducer_ratio >= 1.5;
# cross_host_bytes_ratio about 0.67). Where the hosts cannot be made (not
# root, no namespaces) it prints "multihost: skipped: <reason>" and exits 0.
# Usage: bench/multihost.sh [--steps N]   (default 10)
# Bazel's settings: see bench/common.sh.
set -euo pipefail
. "$(dirname "$0")/common.sh"
steps=10
[ "${1:-}" = "--steps" ] && steps="${2:-10}"
bench_build //bench:reducer_bench
bin=$bench_bin/bench/reducer_bench
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
field() { bench_field "$@"; }
raw=$(field "$t" raw_ms); hier=$(field "$t" hier_ms); flat=$(field "$t" flat_ms)
hb=$(field "$t" hier_cross_bytes); fb=$(field "$t" flat_cross_bytes)
printf '%-48s %10s\n' "measurement (median per step, max over ranks)" "ms"
printf '%-48s %10.2f\n' "raw MPI_Allreduce, $(field "$t" buckets) buckets, 4 ranks" "$raw"
printf '%-48s %10.2f\n' "tpdp reducer, hierarchical shared memory" "$hier"
printf '%-48s %10.2f\n' "tpdp reducer, flat (TPDP_SHM=0)" "$flat"
printf '%-48s %10s\n' "bytes across hosts per step (all ranks)" "MB"
printf '%-48s %10.1f\n' "tpdp reducer, hierarchical shared memory" "$(awk -v b="$hb" 'BEGIN { print b / 1e6 }')"
printf '%-48s %10.1f\n' "tpdp reducer, flat (TPDP_SHM=0, the ring)" "$(awk -v b="$fb" 'BEGIN { print b / 1e6 }')"
awk -v raw="$raw" -v h="$hier" -v f="$flat" -v hb="$hb" -v fb="$fb" \
  'BEGIN { printf "multihost: reducer_ratio %.2f flat_ratio %.2f cross_host_bytes_ratio %.3f\n", raw / h, raw / f, hb / fb }'
