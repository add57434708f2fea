#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Equivalence of TP+DP training with one process: for each (dp, tp) mesh,
# train_mlp --check trains 10 steps distributed and the same model in one
# process on rank 0, and fails if the losses or the gathered parameters
# differ by more than 1e-4. The hidden size (fc1 width) 30 does not divide
# by 4, so tp=4 shards unevenly (8, 8, 8, 6). Writes one <testcase> per case
# into Bazel's XML result so each counts as a test.
#
# With --zero: the same with fully sharded units (--zero 1, 2, 3) on
# (dp, tp) = (2,1), (3,1), (4,1), (2,2), (1,2); 3 classes give the head
# fewer rows than 4 dp ranks (rank 3 holds none), 30 rows shard over 4 dp
# ranks as 8, 8, 8, 6. Each run must also report the ZeRO collective
# counts of 2 blocks + the root (U = 3 units): U all-gathers per step at
# levels 1-2, U + (U - 1) = 5 at level 3 (the root stays gathered), and U
# reduce-scatters. Then gradient accumulation (--accum 3) with the reducer
# and at each level: the reference trains each step's 3 micro-batches as
# one batch of 3 x 24 rows, without accumulating; the collectives per step
# are then 3 x 5 all-gathers at level 3 (each micro-batch gathers again)
# and still 3 reduce-scatters. Then mixed precision (--param-dtype,
# --reduce-dtype): the reference applies the units' casts (train_mlp
# --help), and a bf16 run's losses must differ from the f32 run's on the
# same mesh (the casts took effect). With tp=1 each rank's rows go through
# the same operations in the same order in both, and the casts round alike,
# so the parameters must come out bit-identical (max_abs_param_diff 0).
#
# With --hsdp: hybrid sharding (--dp-replicate R) at each level on
# (R, S, T) = (2,2,1), (2,1,1), (2,2,2), (3,2,1), (1,3,1) (dp = R * S;
# world rank ((r*S)+s)*T+t), plus accumulation on (2,2,1): against the same
# one-process reference, each rank's fsdp line naming dp_shard S and
# dp_replicate R with the collective counts of a shard group (the
# all-gathers and reduce-scatters run over S ranks only).
set -u
bin="$1"
mode="${2:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
pass=0
fail=0
cases=""
declare -A f32_losses
flags=(--layers 2 --hidden 30 --width 12 --inputs 8 --classes 5 --batch 16
       --steps 10 --lr 0.01 --seed 7 --bucket-mib 0.001 --check)
if [ "$mode" = --zero ]; then
  runs=()
  for mesh in "2 1" "3 1" "4 1" "2 2" "1 2"; do
    for z in 1 2 3; do runs+=("$mesh $z"); done
  done
  runs+=("2 1 0 3" "2 2 1 3" "3 1 2 3" "4 1 3 3" "2 2 3 3")
  runs+=("2 1 3 1 bf16 bf16" "4 1 2 1 bf16 f32" "3 1 1 1 f32 f16"
         "2 2 3 3 bf16 bf16" "1 2 3 1 f16 f16")
  flags=(--layers 2 --hidden 30 --width 12 --inputs 8 --classes 3 --batch 24
         --steps 10 --lr 0.01 --seed 7 --check)
elif [ "$mode" = --hsdp ]; then
  # "dp tp zero accum pdt rdt R": dp = R * S
  runs=()
  for rst in "2 2 1" "2 1 1" "2 2 2" "3 2 1" "1 3 1"; do
    set -- $rst
    for z in 1 2 3; do runs+=("$(($1 * $2)) $3 $z 1 f32 f32 $1"); done
  done
  runs+=("4 1 1 3 f32 f32 2" "4 1 3 2 f32 f32 2")
  flags=(--layers 2 --hidden 30 --width 12 --inputs 8 --classes 3 --batch 24
         --steps 10 --lr 0.01 --seed 7 --check)
else
  runs=("1 1 0" "2 1 0" "1 2 0" "2 2 0" "1 4 0" "4 1 0")
fi
for run in "${runs[@]}"; do
  set -- $run
  dp=$1 tp=$2 zero=$3 accum=${4:-1} pdt=${5:-f32} rdt=${6:-f32} rep=${7:-1}
  name="dp${dp}_tp${tp}"
  [ "$mode" = --hsdp ] && name="R${rep}_S$((dp / rep))_T${tp}"
  [ "$zero" = 0 ] || name="${name}_zero${zero}"
  [ "$accum" = 1 ] || name="${name}_accum${accum}"
  [ "$pdt$rdt" = f32f32 ] || name="${name}_param_${pdt}_reduce_${rdt}"
  start=$(date +%s.%N)
  out=$(mpirun -np $((dp * tp)) --oversubscribe --bind-to none \
        --mca mpi_yield_when_idle 1 --timeout 300 \
        "$bin" --dp "$dp" --tp "$tp" --zero "$zero" --accum "$accum" \
        --param-dtype "$pdt" --reduce-dtype "$rdt" --dp-replicate "$rep" \
        "${flags[@]}" 2>&1)
  rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc 2>/dev/null || echo 0)
  line=$(echo "$out" | grep '^check:' | head -1)
  ok=0
  if [ $rc = 0 ] && echo "$out" | grep -q '^check: ok'; then ok=1; fi
  if [ "$zero" != 0 ]; then
    # level 3 gathers again in every micro-batch (5 each); levels 1-2 keep
    # the parameters gathered until the step's update (3); the units
    # reduce once per step
    gathers=$([ "$zero" = 3 ] && echo $((5 * accum)) || echo 3)
    want="per step $gathers all-gathers (.*), 3 reduce-scatters"
    # HSDP: one all-reduce over dp_replicate per unit
    [ "$rep" -gt 1 ] && want="$want (.*), 3 all-reduces over dp_replicate"
    [ "$pdt$rdt" = f32f32 ] ||
      want="param_dtype $pdt, reduce_dtype $rdt, .*$want"
    want="dp_shard $((dp / rep)), dp_replicate $rep, .*$want"
    nlines=$(echo "$out" | grep -c "fsdp: zero $zero, .*$want")
    if [ "$nlines" != $((dp * tp)) ]; then
      ok=0
      line="$line; expected '$want' from each of $((dp * tp)) ranks, got $nlines"
    fi
  fi
  losses=$(echo "$out" | grep '^step ' | tr '\n' ' ')
  [ "$pdt$rdt" = f32f32 ] && f32_losses["$dp $tp $zero $accum"]="$losses"
  if [ "$pdt" != f32 ] && [ "$losses" = "${f32_losses["$dp $tp $zero $accum"]:-}" ]; then
    ok=0
    line="$line; the $pdt run's losses equal the f32 run's: the casts did nothing"
  fi
  if [ "$pdt$rdt" != f32f32 ] && [ "$tp" = 1 ] &&
     ! echo "$line" | grep -q 'max_abs_param_diff 0.000e+00'; then
    ok=0
    line="$line; expected bit-identical parameters at tp=1"
  fi
  echo "[$name] rc=$rc $line"
  if [ $ok = 1 ]; then
    pass=$((pass + 1))
    cases="$cases<testcase classname=\"TrainEquivalence\" name=\"$name\" status=\"run\" result=\"completed\" time=\"$secs\"/>"
  else
    fail=$((fail + 1))
    echo "$out" | tail -30
    msg=$(echo "$line rc=$rc" | sed 's/[<>&"]/_/g')
    cases="$cases<testcase classname=\"TrainEquivalence\" name=\"$name\" status=\"run\" result=\"completed\" time=\"$secs\"><failure message=\"$msg\"/></testcase>"
  fi
done
if [ -n "${XML_OUTPUT_FILE:-}" ]; then
  printf '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites tests="%d" failures="%d"><testsuite name="TrainEquivalence" tests="%d" failures="%d">%s</testsuite></testsuites>\n' \
    $((pass + fail)) $fail $((pass + fail)) $fail "$cases" > "$XML_OUTPUT_FILE"
fi
echo "train equivalence: $pass passed, $fail failed"
[ $fail = 0 ]
