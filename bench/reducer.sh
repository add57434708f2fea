#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The DP reducer on 2 MPI ranks: 25M f32 parameters in 100 tensors of 250k,
# bucket cap 25 MiB (first bucket 1 MiB), 100 MB of gradients per step.
#  (a) raw:  blocking MPI_Allreduce over the same buckets' bytes
#  (b) tpdp: tpdp_reducer prepare, mark_ready 99..0, finalize (view mode)
#      diag: tpdp_allreduce(AVG) over the same buckets: the collective
#      alone (the MPI backend's ring, dividing inside its reduction)
#  (c) ddp:  PyTorch DDP (python3-torch, gloo, 2 processes, same layout):
#            step time minus the same step under no_sync()
# Also peak RSS (ru_maxrss) with gradient_as_bucket_view on and off, and
# the steady RSS and PSS (RSS counts the shared-memory buckets' pages in
# every rank that touched them; PSS splits them).
# Prints a table and last
#   reducer: ratio <raw/tpdp>, vs_ddp <ddp_sync/tpdp_sync>
# (targets: ratio >= 0.9, vs_ddp >= 2.5).
# Usage: bench/reducer.sh [--steps N]   (default 10)
# Bazel's settings: see bench/common.sh.
set -euo pipefail
. "$(dirname "$0")/common.sh"
steps=10
[ "${1:-}" = "--steps" ] && steps="${2:-10}"
bench_build //bench:reducer_bench
bin=$bench_bin/bench/reducer_bench
mpi=("${bench_mpirun_spin[@]}" -np 2)
echo "bench/reducer: 2 ranks, 100 x 250k f32, cap 25 MiB, $steps steps"
t=$("${mpi[@]}" "$bin" time --steps "$steps")
rv=$("${mpi[@]}" "$bin" rss view --steps 3)
rc=$("${mpi[@]}" "$bin" rss copy --steps 3)
d=$(/usr/bin/python3 bench/reducer_ddp.py "$steps")
field() { bench_field "$@"; }
raw=$(field "$t" raw_ms); tp=$(field "$t" tpdp_ms); nb=$(field "$t" buckets)
ddp=$(field "$d" ddp_sync_ms); ddp_step=$(field "$d" ddp_sync_step_ms)
ddp_nosync=$(field "$d" ddp_nosync_step_ms)
printf '%-44s %10s\n' "measurement (median per step, max over ranks)" "ms"
printf '%-44s %10.2f\n' "(a) raw MPI_Allreduce, $nb buckets" "$raw"
printf '%-44s %10.2f\n' "    diag: tpdp_allreduce AVG (ring), $nb buckets" "$(field "$t" ring_avg_ms)"
printf '%-44s %10.2f\n' "(b) tpdp reducer sync (view mode)" "$tp"
printf '%-44s %10.2f\n' "    diag: raw MPI_Iallreduce + Waitall" "$(field "$t" raw_async_ms)"
printf '%-44s %10.2f\n' "    diag: tpdp, divide_factor 1 (MPI SUM)" "$(field "$t" tpdp_nodiv_ms)"
printf '%-44s %10.2f\n' "(c) ddp step with sync" "$ddp_step"
printf '%-44s %10.2f\n' "    ddp step under no_sync" "$ddp_nosync"
printf '%-44s %10.2f\n' "    ddp sync = difference" "$ddp"
printf '%-44s %10s\n' "peak RSS per rank, view mode (MB)" "$(field "$rv" rss_mb_view)"
printf '%-44s %10s\n' "peak RSS per rank, copy mode (MB)" "$(field "$rc" rss_mb_copy)"
printf '%-44s %10s\n' "steady RSS per rank, view mode (MB)" "$(field "$rv" rss_now_mb_view)"
printf '%-44s %10s\n' "steady RSS per rank, copy mode (MB)" "$(field "$rc" rss_now_mb_copy)"
printf '%-44s %10s\n' "steady PSS per rank, view mode (MB)" "$(field "$rv" pss_now_mb_view)"
printf '%-44s %10s\n' "steady PSS per rank, copy mode (MB)" "$(field "$rc" pss_now_mb_copy)"
awk -v raw="$raw" -v tp="$tp" -v ddp="$ddp" \
  'BEGIN { printf "reducer: ratio %.2f, vs_ddp %.2f\n", raw / tp, ddp / tp }'
