#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The helpers every `tpdp` subcommand shares (tools/cli/cli.c): integers read
# as integers with overflow checks ("too large (max N)", never a double's
# "4.61169e+18" or a wrapped int), the 2^20-rank mesh limit of `tpdp mesh`
# on every subcommand taking a mesh, sizes whose bytes must fit in int64,
# and JSON output that always parses.
# usage: cli_test.sh TPDP SEED000_MODEL
set -u
tpdp=$1 seed=$2
fails=0
tmp=${TEST_TMPDIR:-/tmp}

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect_err WANT_RC NEEDLE ARGS...: exit status, a substring of stderr, no
# stdout, and within 20 s (a limit applied before any work).
expect_err() {
  local want_rc=$1 needle=$2
  shift 2
  timeout 20 "$tpdp" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" = "$want_rc" ] || fail "tpdp $*: exit $rc, want $want_rc ($(head -c 300 "$tmp/err"))"
  grep -qF -- "$needle" "$tmp/err" || fail "tpdp $*: stderr lacks '$needle': $(head -c 300 "$tmp/err")"
  [ ! -s "$tmp/out" ] || fail "tpdp $*: wrote $(wc -c <"$tmp/out") bytes to stdout"
  if grep -qE 'e\+[0-9]|-[0-9]{10,}' "$tmp/err"; then
    fail "tpdp $*: misleading number in: $(cat "$tmp/err")"
  fi
}

# --- the mesh limit (2^20 ranks) on mesh, shard, topo and plan ---------------
expect_err 2 "tpdp mesh: mesh 'tp=100000000' has 100000000 ranks: too large (max 1048576)" \
  mesh --mesh tp=100000000
expect_err 2 "tpdp shard: mesh '100000000' has 100000000 ranks: too large (max 1048576)" \
  shard --shape 10 --mesh 100000000 --placements S0
expect_err 2 "mesh 'dp=2048,tp=1024' has 2097152 ranks: too large (max 1048576)" \
  shard --shape 10 --mesh dp=2048,tp=1024 --placements S0,R
# 2^32 x 2^32 overflows int64 when multiplied: said, not wrapped.
expect_err 2 "mesh '4294967296,4294967296' has more than 9223372036854775807 ranks: too large (max 1048576)" \
  shard --shape 10 --mesh 4294967296,4294967296 --placements S0,R
expect_err 2 "bad --mesh value '99999999999999999999': too large (max 9223372036854775807)" \
  shard --shape 10 --mesh 99999999999999999999 --placements S0
expect_err 2 "tpdp topo: mesh 'tp=100000000' has 100000000 ranks: too large (max 1048576)" \
  topo --mesh tp=100000000
echo '{"mesh": {"tp": 100000000}}' >"$tmp/huge_tp.json"
expect_err 1 "tpdp plan: planning_plan_load: $tmp/huge_tp.json: mesh.tp is too large (max 1048576)" \
  plan --model "$seed" --plan "$tmp/huge_tp.json"
echo '{"mesh": {"dp": 4611686018427387904}}' >"$tmp/huge_dp.json"
expect_err 1 "mesh.dp is too large (max 1048576)" plan --model "$seed" --plan "$tmp/huge_dp.json"
echo '{"mesh": {"dp": 2048, "tp": 1024}}' >"$tmp/huge_world.json"
expect_err 1 'mesh: 2097152 ranks up to dim "tp" is too large (max 1048576)' \
  plan --model "$seed" --plan "$tmp/huge_world.json"

# --- shapes: an f32 tensor's bytes must fit in int64 -------------------------
expect_err 2 "bad --shape value '9223372036854775807': too large (max 2305843009213693951)" \
  shard --shape 9223372036854775807,9223372036854775807 --mesh 2 --placements S0
expect_err 2 "--shape '2305843009213693951,2': the element count overflows" \
  shard --shape 2305843009213693951,2 --mesh 2 --placements S0
# A zero size does not excuse the others (their strides would wrap).
expect_err 2 "--shape '0,2305843009213693951,4': the element count overflows" \
  shard --shape 0,2305843009213693951,4 --mesh 2 --placements S0
expect_err 2 "bad --shape value '99999999999999999999': too large (max 2305843009213693951)" \
  shard --shape 99999999999999999999 --mesh 2 --placements S0
expect_err 2 "bad --shape value '-1': too small (min 0)" \
  shard --shape -1 --mesh 2 --placements S0
expect_err 2 "bad --shape value '1x': expected sizes like 10,7" \
  shard --shape 1x --mesh 2 --placements S0
# The largest allowed dim shards without wrapping around.
out=$("$tpdp" shard --shape 2305843009213693951 --mesh 2 --placements S0 --json) \
  || fail "max --shape refused"
[ "$out" = '{"ranks":[{"rank":0,"coords":[0],"local_shape":[1152921504606846976],"global_offset":[0]},{"rank":1,"coords":[1],"local_shape":[1152921504606846975],"global_offset":[1152921504606846976]}]}' ] \
  || fail "max --shape: $out"

# A JSON shape beyond 2^53 - 1 (no longer exact in a double).
echo '{"class": "M", "params": {"w": {"shape": [4611686018427387904]}}}' >"$tmp/huge_shape.json"
echo '{"mesh": {"dp": 2}}' >"$tmp/dp2.json"
expect_err 1 "planning_model_desc_load: $tmp/huge_shape.json: params.w.shape[0] is too large (max 9007199254740991)" \
  plan --model "$tmp/huge_shape.json" --plan "$tmp/dp2.json"

# --- integer options ---------------------------------------------------------
expect_err 2 "--local-ranks '2147483648' is too large (max 4096)" topo --local-ranks 2147483648
expect_err 2 "--local-ranks '0' is too small (min 1)" topo --local-ranks 0
expect_err 2 "--local-ranks 'two' is not an integer" topo --local-ranks two
expect_err 2 "bad element count in 'f32:99999999999999999999': too large (max 1152921504606846975)" \
  buckets f32:99999999999999999999
expect_err 2 "the tensors' total size overflows int64 at tensor 1" \
  buckets f64:1152921504606846975 f64:1152921504606846975
expect_err 2 "bad --limits-bytes value '99999999999999999999': too large (max 9223372036854775807)" \
  buckets --limits-bytes 99999999999999999999 f32:1
expect_err 2 "bad --limits-bytes value '99999999999999999999': too large (max 9223372036854775807)" \
  plan --model "$seed" --plan "$tmp/dp2.json" --limits-bytes 1,99999999999999999999
expect_err 2 "bad --limits-bytes value '0': limits must be > 0" \
  plan --model "$seed" --plan "$tmp/dp2.json" --limits-bytes 0

# --- options with values (cli_options: plan, partition) ---------------------
# Each argument is read in turn; the required ones are checked after, in order.
expect_err 2 "tpdp plan: option --limits-bytes needs a value" \
  plan --model "$seed" --plan "$tmp/dp2.json" --limits-bytes
expect_err 2 "tpdp partition: option --method needs a value" \
  partition --model "$seed" --stages 2 --method
expect_err 2 "tpdp plan: unknown argument '--json=1'" \
  plan --model "$seed" --plan "$tmp/dp2.json" --json=1
expect_err 2 "tpdp partition: unknown argument 'extra'" \
  partition --model="$seed" --stages=2 extra
expect_err 2 "tpdp plan: --model is required" plan
expect_err 2 "tpdp partition: --model is required" partition --json --stages=2
expect_err 2 "tpdp partition: --stages is required" partition --model="$seed"

# --- JSON output parses ------------------------------------------------------
"$tpdp" mesh --mesh ' dp=2 , tp=3 ' --json >"$tmp/mesh.json" || fail "mesh --json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["mesh"]==" dp=2 , tp=3 " and d["size"]==6, d' \
  "$tmp/mesh.json" || fail "mesh --json does not parse: $(cat "$tmp/mesh.json")"

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "all shared CLI checks passed"
