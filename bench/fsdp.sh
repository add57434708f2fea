#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Fully sharded units (tpdp/fsdp.h) against the DDP-style reducer: train_gpt2
# at GPT-2 124M's shape (L=12, C=768, H=12, V=50257, batch 4, seq 64),
# random init, dp=2 (2 ranks sharing the cores), --zero 0 (the baseline,
# measured in the same run) and --zero 1, 2, 3. For each: the peak RSS of
# each rank, the units' persistent bytes, the bytes all-gathered and
# reduce-scattered per step, and ms/step. The baseline runs under
# TPDP_SHM=0 so that its gradient buckets are private memory: in shared
# memory, pages touched by both ranks count in both ranks' RSS.
# Last line (ratios to --zero 0; memory: the larger rank's peak RSS):
#   fsdp: zero3_mem <a> zero2_mem <b> zero1_mem <c> zero3_step <d> zero1_step <e>
# Targets: zero3_mem <= 0.65, zero1_mem <= 0.8, zero3_step <= 1.15,
# zero1_step <= 1.05. Before it, for information (no target), --zero 3
# with --param-dtype bf16 --reduce-dtype bf16 (half the bytes moved; the
# model computes in f32 on copies, so the casts cost CPU time):
#   fsdp bf16: zero3_bf16_step <x> zero3_bf16_mem <y>   (ratios to --zero 0)
# Usage: bench/fsdp.sh [--steps N]   (default 5; step 0 is warm-up)
set -euo pipefail
. "$(dirname "$0")/common.sh"
steps=5
[ "${1:-}" = "--steps" ] && steps="${2:-5}"
bench_build //examples:train_gpt2 //bench:gpt2_gemm_bench
bin=$bench_bin
bench_tmpdir
bench_tokens "$bench_tmp/tokens.bin"
args=(--data "$bench_tmp/tokens.bin" --layers 12 --embd 768 --heads 12
      --vocab 50257 --positions 1024 --batch 4 --seq 64 --steps "$steps"
      --quiet --dp 2)
mpi=("${bench_mpirun[@]}" -np 2)
# The CPU's own OpenBLAS kernels, as bench/gpt2.sh.
better=$("$bin/bench/gpt2_gemm_bench" --better-core)
[ -n "$better" ] && export OPENBLAS_CORETYPE=$better
echo "bench/fsdp: GPT-2 124M shape, dp=2, $steps steps (step 0 excluded)"

# Field of a run's output: the larger peak RSS over ranks (MiB), ms/step.
peak_mib() {
  sed -n 's/^peak memory: //p' | tr ',' '\n' |
    sed -n 's/.*rank [0-9]* \([0-9.]*\) MiB.*/\1/p' | sort -g | tail -1
}
ms_step() { sed -n 's/^throughput: .*, \([0-9.]*\) ms\/step.*/\1/p'; }

declare -A mem step
for z in 0 1 2 3 3bf16; do
  if [ $z = 0 ]; then
    out=$(TPDP_SHM=0 "${mpi[@]}" "$bin/examples/train_gpt2" "${args[@]}" --zero 0)
  elif [ $z = 3bf16 ]; then
    out=$("${mpi[@]}" "$bin/examples/train_gpt2" "${args[@]}" --zero 3 \
          --param-dtype bf16 --reduce-dtype bf16)
  else
    out=$("${mpi[@]}" "$bin/examples/train_gpt2" "${args[@]}" --zero $z)
  fi
  mem[$z]=$(echo "$out" | peak_mib)
  step[$z]=$(echo "$out" | ms_step)
  echo "--zero ${z/bf16/ (bf16)}: ${step[$z]} ms/step, peak RSS ${mem[$z]} MiB (larger rank)"
  echo "$out" | grep -E '^(peak memory|\[rank [0-9]+\] fsdp|throughput)' | sed 's/^/  /'
done
awk -v m0="${mem[0]}" -v s0="${step[0]}" -v mb="${mem[3bf16]}" \
    -v sb="${step[3bf16]}" 'BEGIN {
  printf "fsdp bf16: zero3_bf16_step %.3f zero3_bf16_mem %.3f\n", sb / s0, mb / m0 }'
awk -v m0="${mem[0]}" -v m1="${mem[1]}" -v m2="${mem[2]}" -v m3="${mem[3]}" \
    -v s0="${step[0]}" -v s1="${step[1]}" -v s3="${step[3]}" 'BEGIN {
  printf "fsdp: zero3_mem %.3f zero2_mem %.3f zero1_mem %.3f zero3_step %.3f zero1_step %.3f\n",
         m3 / m0, m2 / m0, m1 / m0, s3 / s0, s1 / s0 }'
