#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# train_mlp's flag checks: each bad combination exits 2 with one
# "train_mlp: ..." line naming the flag, before any MPI start (one process,
# no mpirun). The messages are the ones --help's flags promise.
set -u
bin="$1"
pass=0
fail=0
check() { # expected-text, flags...
  local want="$1"
  shift
  local err rc
  err=$("$bin" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc = 2 ] && [ "$(echo "$err" | grep -c '^train_mlp: ')" = 1 ] &&
     echo "$err" | grep -qF -- "$want"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $* -> exit $rc, stderr: $err (expected: $want)"
  fi
}
check "need --zero 1, 2 or 3" --param-dtype bf16
check "need --zero 1, 2 or 3" --reduce-dtype f16
check "--param-dtype: 'fp8' is not a dtype of the units (f32, bf16 or f16)" \
  --zero 3 --param-dtype fp8
check "--reduce-dtype: 'f64' is not a dtype of the units" --zero 1 \
  --reduce-dtype f64
check "--zero must be 0, 1, 2 or 3" --zero 4
check "--accum must be >= 1" --accum 0
check "--batch must be a positive multiple of --dp" --dp 3 --batch 64
# --device cuda: refused before the build's lack of CUDA is even looked at
check "--save and --load with --zero 1-3 run on --device cpu only" \
  --device cuda --zero 3 --save /nonexistent/ckpt
check "--param-dtype and --reduce-dtype run on --device cpu only" \
  --device cuda --zero 2 --param-dtype bf16
check "--accum > 1 runs on --device cpu only" --device cuda --accum 2
check "--dp-replicate is hybrid sharding of the fully sharded units: it needs --zero 1, 2 or 3" \
  --dp 4 --batch 64 --dp-replicate 2
check "--dp-replicate R needs R >= 1 dividing --dp" --dp 4 --batch 64 \
  --zero 3 --dp-replicate 3
check "--dp-replicate R needs R >= 1 dividing --dp" --zero 3 --dp-replicate 0
check "--dp-replicate > 1 runs on --device cpu only" --device cuda --dp 2 \
  --batch 64 --zero 3 --dp-replicate 2
echo "train_mlp flags: $pass passed, $fail failed"
[ $fail = 0 ]
