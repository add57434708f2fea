#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tpdp.torch's DDP against torch's DDP (gloo) on 2 ranks, in one run: a
# 25M-parameter torch model (10 Linear 1580x1580 + Tanh, batch 8), step =
# zero_grad + forward + backward (bench/torch_ddp.py). Prints a table and
# last
#   torch_ddp: step_ratio <torch/tpdp> sync_ratio <x> hook_us_per_param <y>
# sync = step - the same step under no_sync(); hook = (tpdp's no_sync step -
# the plain module's step) / parameters, on a model of 400 small tensors
# (200 Linear 8x8), where the hooks' cost is not lost in the compute, in
# the calling thread's CPU time (the hooks_* rows). Targets: sync_ratio >= 2.5,
# step_ratio >= 1.3, hook_us_per_param <= 5.
# Needs python3-torch and python3-mpi4py (scripts/install-deps --bench).
# Usage: bench/torch_ddp.sh [--steps N]   (default 10)
# Bazel's settings: see bench/common.sh.
set -euo pipefail
. "$(dirname "$0")/common.sh"
steps=10
[ "${1:-}" = "--steps" ] && steps="${2:-10}"
bench_torch torch_ddp torch mpi4py
out=$("${bench_mpirun[@]}" -np 2 /usr/bin/python3 bench/torch_ddp.py "$steps")
echo "bench/torch_ddp: $(echo "$out" | cut -d' ' -f1-8)"
field() { bench_field "$out" "$1"; }
for k in plain torch_sync torch_nosync tpdp_sync tpdp_nosync hooks_plain \
  hooks_torch_nosync hooks_tpdp_nosync; do
  printf '%-40s %10.2f\n' "$k (median step, max over ranks, ms)" "$(field "${k}_ms")"
done
awk -v s="$(field tpdp_sync_ms)" -v n="$(field tpdp_nosync_ms)" 'BEGIN {
  if (s <= n) print "torch_ddp: warning: tpdp'"'"'s sync step is not slower than its no_sync step: the time is within the noise of a busy machine (sync_ratio below is meaningless); rerun when it is quiet" }'
awk -v p="$(field plain_ms)" -v ts="$(field torch_sync_ms)" \
  -v tn="$(field torch_nosync_ms)" -v s="$(field tpdp_sync_ms)" \
  -v n="$(field tpdp_nosync_ms)" -v hp="$(field hooks_plain_ms)" \
  -v hn="$(field hooks_tpdp_nosync_ms)" 'BEGIN {
  tsync = ts - tn; osync = s - n; if (osync < 1e-3) osync = 1e-3
  printf "torch_ddp: step_ratio %.2f sync_ratio %.2f hook_us_per_param %.2f\n",
    ts / s, tsync / osync, (hn - hp) * 1000 / 400 }'
