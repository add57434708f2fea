#!/bin/bash
# Overhead of tpdp itself in the TP+DP training example: hooks (reconstruct
# + localize around every forward) and reducer bookkeeping (prepare and
# mark_ready, which also launch the bucket allreduces), as a share of the
# step time; collectives and GEMMs excluded. Runs 4 CPU ranks (dp=2, tp=2);
# the one-GPU run lives in scripts/gpu-check.
# Usage: bench/train.sh [extra train_mlp flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //examples:train_mlp >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(--dp 2 --tp 2 --layers 4 --hidden 1030 --width 512 --inputs 256
      --classes 32 --batch 256 --steps 20 --quiet "$@")
echo "bench/train: mpirun -np 4 train_mlp ${args[*]}"
out=$(mpirun -np 4 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
      bazel-bin/examples/train_mlp "${args[@]}")
echo "$out"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "bench/train: GPU present: its run (train_mlp --device cuda, overhead"
  echo "  and throughput) is part of scripts/gpu-check; see bench/results/gpu.md"
else
  echo "bench/train: no GPU here: GPU run skipped (scripts/gpu-check on a GPU"
  echo "  machine; last results in bench/results/gpu.md)"
fi
pct=$(echo "$out" | sed -n 's/.*= \([0-9.]*\)% of step time.*/\1/p')
echo "train: tpdp_overhead ${pct}%"
