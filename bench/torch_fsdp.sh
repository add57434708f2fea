#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tpdp.torch's fully_shard against its DistributedDataParallel, in one run:
# examples/torch/train_gpt2.py at GPT-2 124M's shape (L=12, C=768, H=12,
# V=50257, batch 4, seq 64, random init) on 2 ranks sharing the cores,
# --fsdp (fully_shard on each block and the root, reshard_after_forward
# True) and without (DistributedDataParallel over the same 2 ranks). For
# each: the median ms/step (step 0, the warm-up, left out; the slower
# rank's) and each rank's peak RSS. DDP runs under TPDP_SHM=0 so that its
# gradient buckets are private memory (in shared memory, pages touched by
# both ranks count in both ranks' RSS), as bench/fsdp.sh does.
# Last line (FSDP / DDP; memory: the larger rank's peak RSS):
#   torch_fsdp: mem_ratio <a> step_ratio <b>
# Targets: a <= 0.7, b <= 1.2. Before it, for information (no target),
# --fsdp under MixedPrecisionPolicy(param_dtype=bfloat16,
# reduce_dtype=float32), FSDP2's usual policy (the gathered parameters and
# their gradients in bf16; torch computes in bf16):
#   torch_fsdp bf16: mem_ratio <x> step_ratio <y>   (ratios to DDP)
# Needs python3-torch (scripts/install-deps --bench).
# Usage: bench/torch_fsdp.sh [--steps N]   (default 5)
# Bazel's settings: see bench/common.sh.
set -euo pipefail
. "$(dirname "$0")/common.sh"
steps=5
[ "${1:-}" = "--steps" ] && steps="${2:-5}"
bench_torch torch_fsdp torch
bench_tmpdir
bench_tokens "$bench_tmp/tokens.bin"
args=(--data "$bench_tmp/tokens.bin" --layers 12 --embd 768 --heads 12
      --vocab 50257 --positions 1024 --batch 4 --seq 64 --steps "$steps"
      --dp 2 --report)
echo "bench/torch_fsdp: GPT-2 124M shape, 2 ranks, $steps steps (step 0 excluded)"

# The larger peak RSS over ranks (MiB), ms/step.
peak_mib() {
  sed -n 's/^peak memory: //p' | tr ',' '\n' |
    sed -n 's/.*rank [0-9]* \([0-9.]*\) MiB.*/\1/p' | sort -g | tail -1
}
ms_step() { sed -n 's/^throughput: \([0-9.]*\) ms\/step.*/\1/p'; }

declare -A mem step
run() { "${bench_mpirun[@]}" -np 2 /usr/bin/python3 examples/torch/train_gpt2.py "${args[@]}" "$@"; }
for kind in ddp fsdp fsdp_bf16; do
  case $kind in
    ddp) out=$(TPDP_SHM=0 run) ;;
    fsdp) out=$(run --fsdp) ;;
    fsdp_bf16) out=$(run --fsdp --param-dtype bf16 --reduce-dtype f32) ;;
  esac
  mem[$kind]=$(echo "$out" | peak_mib)
  step[$kind]=$(echo "$out" | ms_step)
  echo "$kind: ${step[$kind]} ms/step, peak RSS ${mem[$kind]} MiB (larger rank)"
  echo "$out" | grep -E '^(step|peak memory|throughput)' | sed 's/^/  /'
done
ratios() {
  awk -v md="${mem[ddp]}" -v mf="${mem[$2]}" -v sd="${step[ddp]}" \
    -v sf="${step[$2]}" -v label="$1" 'BEGIN {
    printf "%s: mem_ratio %.3f step_ratio %.3f\n", label, mf / md, sf / sd }'
}
ratios "torch_fsdp bf16" fsdp_bf16
ratios torch_fsdp fsdp
