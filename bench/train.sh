#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Overhead of tpdp itself in the TP+DP training example: hooks (reconstruct
# + localize around every forward) and reducer bookkeeping (its time in
# prepare, mark_ready and finalize minus collectives and passes over
# gradient data), as a share of the step time. Three CPU configurations of
# the same model: dp=1 (1 rank: the reducer on a one-rank communicator),
# dp=2 (2 ranks), dp=2 x tp=2 (4 ranks, oversubscribed on a 2-core
# machine). The one-GPU run lives in scripts/gpu-check.
# Prints each run's summary, then last
#   train: tpdp_overhead <worst>% (dp1 <a>%, dp2 <b>%, dp2tp2 <c>%)
# (target: <= 1% each).
# Usage: bench/train.sh [extra train_mlp flags]
set -euo pipefail
. "$(dirname "$0")/common.sh"
bench_build //examples:train_mlp
shape=(--layers 4 --hidden 1030 --width 512 --inputs 256 --classes 32
       --batch 256 --steps 20 --quiet "$@")
mpi=("${bench_mpirun[@]}")

# run NAME NP DP TP: one configuration; sets pct_NAME.
run() {
  local name=$1 np=$2 dp=$3 tp=$4
  echo "bench/train: $name: mpirun -np $np train_mlp --dp $dp --tp $tp ${shape[*]}"
  local out
  out=$("${mpi[@]}" -np "$np" "$bench_bin/examples/train_mlp" --dp "$dp" \
        --tp "$tp" "${shape[@]}")
  echo "$out" | sed 's/^/  /'
  local pct
  pct=$(echo "$out" | sed -n 's/.*= \([0-9.]*\)% of step time.*/\1/p')
  if [ -z "$pct" ]; then
    echo "bench/train: $name printed no overhead line" >&2
    exit 1
  fi
  printf -v "pct_$name" '%s' "$pct"
}

run dp1 1 1 1
run dp2 2 2 1
run dp2tp2 4 2 2
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "bench/train: GPU present: its run (train_mlp --device cuda, overhead"
  echo "  and throughput) is part of scripts/gpu-check; see bench/results/gpu.md"
else
  echo "bench/train: no GPU here: GPU run skipped (scripts/gpu-check on a GPU"
  echo "  machine; last results in bench/results/gpu.md)"
fi
worst=$(printf '%s\n' "$pct_dp1" "$pct_dp2" "$pct_dp2tp2" | sort -g | tail -1)
echo "train: tpdp_overhead ${worst}% (dp1 ${pct_dp1}%, dp2 ${pct_dp2}%, dp2tp2 ${pct_dp2tp2}%)"
