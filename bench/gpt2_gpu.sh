#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# bench/gpt2_gpu.sh: GPT-2 at the 124M shape (L12 C768 H12 V50257, 1024
# positions), B=4 T=1024, random initialisation, on one GPU:
# `train_gpt2 --device cuda` with TF32 tensor-core matmuls (--tf32, what
# llm.c and PyTorch's allow_tf32 use on sm80 and newer) and in strict FP32
# (the default, what --check uses), both on the same token file.
#
# The baseline: llm.c's FP32 CUDA trainer (train_gpt2_fp32.cu from
# karpathy/llm.c), which this repository does not ship or build. Build it
# yourself and point LLMC_FP32 at the binary; this script then writes the
# 124M-shape checkpoint it loads (llm.c's gpt2_124M.bin format, version 3:
# a header of 256 int32, then the parameters in llm.c's order with the
# vocabulary padded to 50304 rows; random values) and the token file, runs
# it on the same GPU in this run and prints the ratio. llm.c's timed steps
# are its train steps after the first (its own per-step times), as ours.
#
# usage: bench/gpt2_gpu.sh TRAIN_GPT2 [STEPS]   (default 12 steps)
# Without TRAIN_GPT2 (as scripts/bench-all runs every bench) it prints
# "gpt2_gpu: skipped: <reason>" and exits 0: scripts/gpu-check runs it on a
# GPU with the --config=cuda build.
# env:   LLMC_FP32   llm.c's train_gpt2_fp32 binary (optional)
#        GPT2_GPU_WORK  work folder (default: a temporary one)
# last line: gpt2_gpu: tf32_tokens_per_s <a> fp32_tokens_per_s <b>
#            [llmc_tokens_per_s <c> ratio_vs_llmc <a/c>]
set -uo pipefail
if [ $# -lt 1 ]; then
  if nvidia-smi -L >/dev/null 2>&1; then
    why="no TRAIN_GPT2 given (a --config=cuda build; scripts/gpu-check passes it)"
  else
    why="no GPU here (scripts/gpu-check runs it on a GPU machine)"
  fi
  echo "gpt2_gpu: skipped: $why"
  exit 0
fi
BIN=$(realpath "$1") # before common.sh moves to the repository's root
STEPS=${2:-12}
WORK=$(realpath -m "${GPT2_GPU_WORK:-$(mktemp -d)}")
# The shared prologue (Open MPI's variables); nothing here builds with
# Bazel: a GPU machine has none (scripts/gpu-check built BIN).
. "$(dirname "$0")/common.sh"
mkdir -p "$WORK"
B=4 T=1024
# Tokens for STEPS batches of B*T (+1), uniform over the vocabulary.
python3 - "$WORK/tokens.bin" "$((STEPS * B * T + 1))" <<'PY' || exit 1
import random, struct, sys
path, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[rng.randrange(50257) for _ in range(n)]))
PY
SHAPE="--layers 12 --embd 768 --heads 12 --vocab 50257 --positions 1024"
tps() { sed -n 's/^throughput: \([0-9.]*\) tokens\/s, \([0-9.]*\) ms\/step.*/\1 \2/p'; }
declare -A TOK MS
for mode in tf32 fp32; do
  flag=""
  [ $mode = tf32 ] && flag="--tf32"
  echo "== train_gpt2 --device cuda $flag $SHAPE --batch $B --seq $T --steps $STEPS"
  # shellcheck disable=SC2086
  out=$("$BIN" --device cuda $flag $SHAPE --batch $B --seq $T --steps "$STEPS" \
        --data "$WORK/tokens.bin" --quiet 2>&1)
  rc=$?
  echo "$out" | grep -v '^$'
  [ $rc = 0 ] || { echo "gpt2_gpu: train_gpt2 ($mode) failed (exit $rc)"; exit 1; }
  read -r TOK[$mode] MS[$mode] <<<"$(echo "$out" | tps)"
done
line="gpt2_gpu: tf32_tokens_per_s ${TOK[tf32]} fp32_tokens_per_s ${TOK[fp32]}"
if [ -n "${LLMC_FP32:-}" ]; then
  echo "== llm.c train_gpt2_fp32 ($LLMC_FP32), B=$B T=$T"
  python3 - "$WORK/gpt2_124M.bin" <<'PY' || exit 1
# llm.c's model file, version 3 (padded vocabulary), random values as
# GPT-2's initialisation: N(0, 0.02) weights, LayerNorm weights 1, biases 0.
import struct, sys
import numpy as np
L, C, V, Vp, maxT, H = 12, 768, 50257, 50304, 1024, 12
rng = np.random.default_rng(1)
def normal(n): return (0.02 * rng.standard_normal(n)).astype(np.float32)
parts = [normal(Vp * C), normal(maxT * C), np.ones(L * C, np.float32),
         np.zeros(L * C, np.float32), normal(L * 3 * C * C),
         np.zeros(L * 3 * C, np.float32), normal(L * C * C),
         np.zeros(L * C, np.float32), np.ones(L * C, np.float32),
         np.zeros(L * C, np.float32), normal(L * 4 * C * C),
         np.zeros(L * 4 * C, np.float32), normal(L * C * 4 * C),
         np.zeros(L * C, np.float32), np.ones(C, np.float32),
         np.zeros(C, np.float32)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240326, 3, maxT, V, L, H, C, Vp,
                        *([0] * 248)))
    for p in parts:
        f.write(p.tobytes())
PY
  # llm.c reads gpt2_124M.bin from its working folder; no validation
  # batches beyond one, no sampling.
  out=$(cd "$WORK" && "$LLMC_FP32" -i tokens.bin -j tokens.bin -b $B -t $T \
        -v 100000 -m 1 -s 100000 -g 1 2>&1)
  rc=$?
  echo "$out" | grep -E '^(step|total|\| (device|TF32|num_parameters))'
  [ $rc = 0 ] || { echo "gpt2_gpu: llm.c failed (exit $rc)"; echo "$out" | tail -5; exit 1; }
  # its steps after the first, as ours
  ms=$(echo "$out" | sed -n 's/^step *\([0-9]*\)\/[0-9]*: train loss [^(]*(\([0-9.]*\) ms.*/\1 \2/p' |
       awk '$1 > 1 { s += $2; n++ } END { if (n) printf "%.3f", s / n }')
  [ -n "$ms" ] || { echo "gpt2_gpu: no llm.c step times"; exit 1; }
  llmc=$(awk -v ms="$ms" -v n=$((B * T)) 'BEGIN { printf "%.1f", n / (ms / 1000) }')
  ratio=$(awk -v a="${TOK[tf32]}" -v b="$llmc" 'BEGIN { printf "%.3f", a / b }')
  echo "llm.c: $llmc tokens/s, $ms ms/step (steps 2..; train_gpt2 --tf32: ${MS[tf32]} ms/step, strict FP32: ${MS[fp32]} ms/step)"
  line="$line llmc_tokens_per_s $llmc ratio_vs_llmc $ratio"
fi
[ -z "${GPT2_GPU_WORK:-}" ] && rm -rf "$WORK"
echo "$line"
