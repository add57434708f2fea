#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The trainers choose OpenBLAS's kernels themselves (examples/common/
# blas_core.h). On this CPU, whatever OpenBLAS picks alone, a preloaded
# stand-in (blas_shim.c) makes OpenBLAS answer "Prescott", as Debian's
# 0.3.21 does on a recent Xeon. Checked:
#   - the value a trainer sets is the one this CPU's flags call for
#     (/proc/cpuinfo, read here: avx512f+bw+vl+dq SKYLAKEX, avx2+fma
#     HASWELL, avx SANDYBRIDGE), and the kernels it prints are the ones
#     OPENBLAS_CORETYPE=<that value> gives;
#   - each process restarts exactly once, also under mpirun (2 ranks);
#   - an OPENBLAS_CORETYPE in the environment wins (no restart);
#   - without the stand-in, the line names OpenBLAS's own kernels.
# usage: blas_core_test.sh TRAIN_MLP TRAIN_GPT2 SHIM.so MAKE_TOKENS
set -u
mlp=$(readlink -f "$1")
gpt2=$(readlink -f "$2")
shim=$(readlink -f "$3")
make_tokens=$(readlink -f "$4")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OPENBLAS_CORETYPE EX_OPENBLAS_OWN_CHOICE
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { echo "[ok] $*"; pass=$((pass + 1)); }
bad() { echo "[FAILED] $*"; fail=$((fail + 1)); }
kernels() { sed -n 's/^openblas: [0-9]* threads per rank, \(.*\); OpenBLAS .*/\1/p'; }

flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { case "$flags" in *" $1 "*) return 0 ;; esac; return 1; }
want=
if has avx512f && has avx512bw && has avx512vl && has avx512dq; then
  want=SKYLAKEX
elif has avx2 && has fma; then
  want=HASWELL
elif has avx; then
  want=SANDYBRIDGE
fi

# Without the stand-in: OpenBLAS's own kernels, chosen by it or by the
# trainer when they are narrower than the CPU's.
line=$("$mlp" --steps 2 --quiet 2>&1 | kernels)
case "$line" in
  *"kernels (OpenBLAS's choice)"|*"set by this program: OpenBLAS alone chose"*)
    ok "plain run: $line" ;;
  *) bad "plain run: no openblas line or an unexpected one: '$line'" ;;
esac

if [ -z "$want" ]; then
  echo "blas_core_test: this CPU has no AVX: no wider kernels to choose; the restart cases skipped"
  echo "blas_core_test: $pass passed, $fail failed"
  [ $fail = 0 ]
  exit
fi

# What OpenBLAS runs when told $want.
name=$(OPENBLAS_CORETYPE=$want "$mlp" --steps 2 --quiet 2>&1 | kernels |
       sed -n "s/^\([A-Za-z0-9]*\) kernels (OPENBLAS_CORETYPE=$want from the environment)$/\1/p")
if [ -n "$name" ]; then
  ok "OPENBLAS_CORETYPE=$want runs OpenBLAS's $name kernels"
else
  bad "OPENBLAS_CORETYPE=$want: no kernel name in the openblas line"
fi

expect="$name kernels (OPENBLAS_CORETYPE=$want set by this program: OpenBLAS alone chose Prescott)"
log=$tmp/starts.log
# Under ASan (scripts/run-tests --config=asan) the sanitizer's runtime must
# come first among the preloaded libraries, before the stand-in.
preload=$shim
asan=$(ldd "$mlp" | sed -n 's/^[[:space:]]*libasan[^ ]* => \([^ ]*\) .*/\1/p' | head -1)
[ -n "$asan" ] && preload="$asan $shim"
# starts PROGRAM: the process images of PROGRAM the shim logged
starts() { grep -c "^$1 " "$log" 2>/dev/null || echo 0; }

: > "$log"
line=$(LD_PRELOAD="$preload" BLAS_SHIM_LOG=$log "$mlp" --steps 2 --quiet 2>&1 | kernels)
n=$(starts train_mlp)
if [ "$line" = "$expect" ] && [ "$n" = 2 ] &&
   grep -q "^train_mlp .* OPENBLAS_CORETYPE=$want\$" "$log"; then
  ok "train_mlp on a 'Prescott' OpenBLAS: restarted once with $want: $line"
else
  bad "train_mlp on a 'Prescott' OpenBLAS: '$line', $n starts (expected '$expect', 2)"
  cat "$log"
fi

python3 "$make_tokens" "$make_tokens" "$tmp/tokens.bin" >/dev/null
: > "$log"
out=$(LD_PRELOAD="$preload" BLAS_SHIM_LOG=$log timeout 300 mpirun --oversubscribe \
      -np 2 "$gpt2" --data "$tmp/tokens.bin" --dp 2 --steps 3 --quiet 2>&1)
rc=$?
line=$(echo "$out" | kernels)
n=$(starts train_gpt2)
if [ $rc = 0 ] && [ "$line" = "$expect" ] && [ "$n" = 4 ]; then
  ok "mpirun -np 2 train_gpt2: each rank restarted once: $line"
else
  bad "mpirun -np 2 train_gpt2: exit $rc, '$line', $n starts (expected '$expect', 4)"
  echo "$out" | tail -20
  cat "$log"
fi

# The user's variable wins: no restart, their kernels.
user=HASWELL
[ "$want" = SANDYBRIDGE ] && user=SANDYBRIDGE
: > "$log"
line=$(LD_PRELOAD="$preload" BLAS_SHIM_LOG=$log OPENBLAS_CORETYPE=$user "$mlp" \
       --steps 2 --quiet 2>&1 | kernels)
n=$(starts train_mlp)
case "$line" in
  *" kernels (OPENBLAS_CORETYPE=$user from the environment)")
    if [ "$n" = 1 ]; then ok "OPENBLAS_CORETYPE=$user wins: $line"
    else bad "OPENBLAS_CORETYPE=$user: $n starts, expected 1"; fi ;;
  *) bad "OPENBLAS_CORETYPE=$user: '$line'" ;;
esac

echo "blas_core_test: $pass passed, $fail failed"
[ $fail = 0 ]
