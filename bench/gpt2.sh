#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# train_gpt2 at GPT-2 124M's shape (L=12, C=768, H=12, V=50257, batch 4,
# seq 64), random init: one rank with the machine's cores, then dp=2 and
# tp=2 (2 ranks, the cores shared). Each run's summary is printed; the
# baseline measured in the same run is the GEMM floor (the step's matmuls
# alone, bench/gpt2_gemm_bench.c, on the same threads), and the one-rank
# step is printed as a ratio to it. Reference (the issue): llm.c's CPU
# trainer takes 4.05 s/step for this shape on a machine like this one.
# Last line:
#   gpt2: ms_per_step <x> tokens_per_s <y> tpdp_overhead <p>%
# (x, y: the one-rank run; p: the largest of the three runs).
# Usage: bench/gpt2.sh [--steps N]   (default 6; step 0 is warm-up)
set -euo pipefail
. "$(dirname "$0")/common.sh"
steps=6
[ "${1:-}" = "--steps" ] && steps="${2:-6}"
bench_build //examples:train_gpt2 //bench:gpt2_gemm_bench
bin=$bench_bin
bench_tmpdir
bench_tokens "$bench_tmp/tokens.bin"
args=(--data "$bench_tmp/tokens.bin" --layers 12 --embd 768 --heads 12
      --vocab 50257 --positions 1024 --batch 4 --seq 64 --steps "$steps"
      --quiet)
mpi=("${bench_mpirun[@]}" -np 2)
cores=$(nproc)
# OpenBLAS 0.3.21 (Debian 12) does not recognise recent Xeons and runs its
# generic SSE3 kernels there. train_gpt2 and the GEMM floor choose the
# kernel set the CPU supports themselves (examples/common/blas_core.h;
# OPENBLAS_CORETYPE, if set, decides instead), so this bench measures what
# a user gets; each run's "openblas:" line says which kernels ran.
echo "bench/gpt2: GPT-2 124M shape, $steps steps (step 0 excluded), $cores cores"
floor=$("$bin/bench/gpt2_gemm_bench" --threads "$cores" --rows 256)
echo "one rank: $floor"
one=$("$bin/examples/train_gpt2" "${args[@]}")
echo "$one"
echo "dp=2 (2 ranks):"
dp=$("${mpi[@]}" "$bin/examples/train_gpt2" "${args[@]}" --dp 2)
echo "$dp"
echo "tp=2 (2 ranks):"
tp=$("${mpi[@]}" "$bin/examples/train_gpt2" "${args[@]}" --tp 2)
echo "$tp"
ms=$(echo "$one" | sed -n 's/^throughput: [0-9.]* tokens\/s, \([0-9.]*\) ms\/step.*/\1/p')
tps=$(echo "$one" | sed -n 's/^throughput: \([0-9.]*\) tokens\/s.*/\1/p')
floor_ms=$(echo "$floor" | sed -n 's/^gemm_floor: \([0-9.]*\) ms.*/\1/p')
pct=$(printf '%s\n%s\n%s\n' "$one" "$dp" "$tp" |
      sed -n 's/.*= \([0-9.]*\)% of step time.*/\1/p' | sort -g | tail -1)
awk -v s="$ms" -v f="$floor_ms" 'BEGIN { printf "one rank: step / gemm floor = %.2f (llm.c CPU reference: 4050 ms/step)\n", s / f }'
echo "gpt2: ms_per_step $ms tokens_per_s $tps tpdp_overhead ${pct}%"
