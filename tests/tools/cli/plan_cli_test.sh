#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# `tpdp plan` end to end. Expected texts are written out by hand: the tree
# and the unit -> FQN dict are PyTorch FSDP's tree report's docstring (pytorch
# torch/distributed/fsdp/_debug_utils.py), the TP local shapes, bytes and
# buckets are worked out in the comments below.
# usage: plan_cli_test.sh TPDP SEED000_MODEL UNITS_PLAN TP_PLAN
set -u
tpdp=$1 seed=$2 units_plan=$3 tp_plan=$4
fails=0
tmp=${TEST_TMPDIR:-/tmp}

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# section FILE HEADER: the lines after "HEADER" up to the next empty line.
section() { sed -n "/^$2\$/,/^\$/p" "$1" | sed '1d;$d'; }

# expect_err WANT_RC NEEDLE ARGS...: exit status and a substring of stderr.
expect_err() {
  local want_rc=$1 needle=$2
  shift 2
  "$tpdp" plan "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" = "$want_rc" ] || fail "tpdp plan $*: exit $rc, want $want_rc ($(cat "$tmp/err"))"
  grep -qF -- "$needle" "$tmp/err" || fail "tpdp plan $*: stderr lacks '$needle': $(cat "$tmp/err")"
}

# --- PyTorch FSDP's tree report: units "", "u1", "u2", no TP --------------------------------
"$tpdp" plan --model "$seed" --plan "$units_plan" >"$tmp/seed.txt" 2>"$tmp/err" \
  || fail "seed plan failed: $(cat "$tmp/err")"

cat >"$tmp/want_tree" <<'TREE'
[CompositeModel] FULLY SHARDED
    l1[Linear]
    u1[UnitModule] FULLY SHARDED
        u1.l1[Linear]
        u1.seq[Sequential]
            u1.seq.0[ReLU]
            u1.seq.1[Linear]
            u1.seq.2[ReLU]
        u1.l2[Linear]
    u2[UnitModule] FULLY SHARDED
        u2.l1[Linear]
        u2.seq[Sequential]
            u2.seq.0[ReLU]
            u2.seq.1[Linear]
            u2.seq.2[ReLU]
        u2.l2[Linear]
    l2[Linear]
TREE
section "$tmp/seed.txt" 'sharded module tree:' >"$tmp/got_tree"
diff "$tmp/want_tree" "$tmp/got_tree" >"$tmp/diff" || fail "tree text differs from PyTorch FSDP's tree report:
$(cat "$tmp/diff")"

cat >"$tmp/want_map" <<'MAP'
{'[CompositeModel]': ['l1.weight', 'l1.bias', 'l2.weight', 'l2.bias'],
'u1[UnitModule]': ['u1.l1.weight', 'u1.l1.bias', 'u1.seq.1.weight', 'u1.seq.1.bias', 'u1.l2.weight', 'u1.l2.bias'],
'u2[UnitModule]': ['u2.l1.weight', 'u2.l1.bias', 'u2.seq.1.weight', 'u2.seq.1.bias', 'u2.l2.weight', 'u2.l2.bias']
}
MAP
section "$tmp/seed.txt" 'managed parameters per unit:' >"$tmp/got_map"
diff "$tmp/want_map" "$tmp/got_map" >"$tmp/diff" || fail "unit map differs from PyTorch FSDP's tree report:
$(cat "$tmp/diff")"

# 16 params, 4*(64+8)*... = 576 elements of f32 = 2304 bytes, one bucket.
grep -qx '  every rank: 2304 bytes' "$tmp/seed.txt" || fail "seed bytes: $(cat "$tmp/seed.txt")"
grep -qx '  every rank: 1 bucket' "$tmp/seed.txt" || fail "seed buckets: $(cat "$tmp/seed.txt")"

# JSON: the same tree and map.
"$tpdp" plan --model "$seed" --plan "$units_plan" --json >"$tmp/seed.json" 2>"$tmp/err" \
  || fail "seed --json failed: $(cat "$tmp/err")"
want_tree_json=$(awk '{printf "%s\\n", $0}' "$tmp/want_tree")
grep -qF "\"tree\":\"$want_tree_json\"" "$tmp/seed.json" || fail "json tree: $(cat "$tmp/seed.json")"
grep -qF '"managed":{"[CompositeModel]":["l1.weight","l1.bias","l2.weight","l2.bias"],"u1[UnitModule]":["u1.l1.weight","u1.l1.bias","u1.seq.1.weight","u1.seq.1.bias","u1.l2.weight","u1.l2.bias"],"u2[UnitModule]":["u2.l1.weight","u2.l1.bias","u2.seq.1.weight","u2.seq.1.bias","u2.l2.weight","u2.l2.bias"]}' \
  "$tmp/seed.json" || fail "json managed: $(cat "$tmp/seed.json")"

# --- TP: dp=2, tp=2, u1.l1 colwise, u1.l2 rowwise ---------------------------
# u1.l1.weight [8,8] Shard(0) -> [4,8] (128 B); bias [8] Shard(0) -> [4];
# u1.l2.weight [8,8] Shard(1) -> [8,4]; its bias Replicate [8].
# Bytes per rank: 2304 - 4*(32 + 4 + 32) = 2032 on every rank.
"$tpdp" plan --model "$seed" --plan "$tp_plan" --json >"$tmp/tp.json" 2>"$tmp/err" \
  || fail "tp --json failed: $(cat "$tmp/err")"
for want in \
  '{"fqn":"u1.l1.weight","shared":[],"dtype":"f32","shape":[8,8],"style":"colwise","tp_module":"u1.l1","placements":["R","S0"],"local_shapes":[[4,8],[4,8]],"local_bytes":[128,128]}' \
  '{"fqn":"u1.l1.bias","shared":[],"dtype":"f32","shape":[8],"style":"colwise","tp_module":"u1.l1","placements":["R","S0"],"local_shapes":[[4],[4]],"local_bytes":[16,16]}' \
  '{"fqn":"u1.l2.weight","shared":[],"dtype":"f32","shape":[8,8],"style":"rowwise","tp_module":"u1.l2","placements":["R","S1"],"local_shapes":[[8,4],[8,4]],"local_bytes":[128,128]}' \
  '{"fqn":"u1.l2.bias","shared":[],"dtype":"f32","shape":[8],"style":"rowwise","tp_module":"u1.l2","placements":["R","R"],"local_shapes":[[8],[8]],"local_bytes":[32,32]}' \
  '{"fqn":"l1.weight","shared":[],"dtype":"f32","shape":[8,8],"style":null,"tp_module":null,"placements":["R","R"],"local_shapes":[[8,8],[8,8]],"local_bytes":[256,256]}' \
  '{"rank":3,"coords":{"dp":1,"tp":1},"tp_rank":1,"bytes":2032,' \
  '{"rank":0,"coords":{"dp":0,"tp":0},"tp_rank":0,"bytes":2032,' \
  '"mesh":{"dims":["dp","tp"],"sizes":[2,2],"world":4,"tp_size":2}' \
  '"u1.l1[Linear]":["u1.l1.weight","u1.l1.bias"]' \
  ; do
  grep -qF -- "$want" "$tmp/tp.json" || fail "tp json lacks $want: $(cat "$tmp/tp.json")"
done

"$tpdp" plan --model "$seed" --plan "$tp_plan" >"$tmp/tp.txt" 2>"$tmp/err" || fail "tp text failed"
grep -q '^  u1.l1.weight  *f32  *\[8, 8\]  *colwise  *\[R, S(0)\]  *\[4, 8\]  *\[4, 8\]$' "$tmp/tp.txt" \
  || fail "tp text row u1.l1.weight: $(cat "$tmp/tp.txt")"
grep -q '^  u1.l2.weight  *f32  *\[8, 8\]  *rowwise  *\[R, S(1)\]  *\[8, 4\]  *\[8, 4\]$' "$tmp/tp.txt" \
  || fail "tp text row u1.l2.weight: $(cat "$tmp/tp.txt")"
grep -qx '  tp=0 (ranks 0, 2): 2032 bytes' "$tmp/tp.txt" || fail "tp bytes tp=0"
grep -qx '  tp=1 (ranks 1, 3): 2032 bytes' "$tmp/tp.txt" || fail "tp bytes tp=1"
grep -qx '        u1.l1\[Linear\] TP COLWISE' "$tmp/tp.txt" || fail "tp unit suffix"
grep -qx '    u1\[UnitModule\] FULLY SHARDED' "$tmp/tp.txt" || fail "dp unit suffix"
grep -qx '    u2\[UnitModule\]' "$tmp/tp.txt" || fail "u2 not a unit"

# Buckets with limits 256,512 (bytes of the tp-rank-0 local params in
# registration order: 256 32 128 16 256 32 128 32 256 32 256 32 256 32 256
# 32): [l1.w]=256 closes at the first limit; then 512: l1.b..u1.l2.w = 592,
# u1.l2.b..u2.seq.1.w = 576, u2.seq.1.b..l2.w = 576, [l2.b] = 32 open.
# Launch order is the reverse.
"$tpdp" plan --model "$seed" --plan "$tp_plan" --limits-bytes 256,512 >"$tmp/b.txt" 2>"$tmp/err" \
  || fail "limits failed: $(cat "$tmp/err")"
sed -n '/^  tp=0 (ranks 0, 2): 5 buckets$/,/^  tp=1/p' "$tmp/b.txt" | sed '1d;$d' >"$tmp/got_b"
cat >"$tmp/want_b" <<'B'
    bucket 0: f32, 32 bytes (limit 512): l2.bias
    bucket 1: f32, 576 bytes (limit 512): u2.seq.1.bias u2.l2.weight u2.l2.bias l2.weight
    bucket 2: f32, 576 bytes (limit 512): u1.l2.bias u2.l1.weight u2.l1.bias u2.seq.1.weight
    bucket 3: f32, 592 bytes (limit 512): l1.bias u1.l1.weight u1.l1.bias u1.seq.1.weight u1.seq.1.bias u1.l2.weight
    bucket 4: f32, 256 bytes (limit 256): l1.weight
B
diff "$tmp/want_b" "$tmp/got_b" >"$tmp/diff" || fail "buckets differ:
$(cat "$tmp/diff")"

# Uneven: tp=3 -> chunk ceil(8/3) = 3: shards 3, 3, 2. Bytes: 1760 untouched
# + 4*(24+3+24) = 1964 on tp 0 and 1, + 4*(16+2+16) = 1896 on tp 2.
echo '{"mesh": {"dp": 2, "tp": 3}, "tp": {"u1.l1": "colwise", "u1.l2": "rowwise"}}' >"$tmp/tp3.json"
"$tpdp" plan --model "$seed" --plan "$tmp/tp3.json" >"$tmp/tp3.txt" 2>"$tmp/err" || fail "tp3 failed: $(cat "$tmp/err")"
grep -qx '  tp=0 (ranks 0, 3): 1964 bytes' "$tmp/tp3.txt" || fail "tp3 bytes tp=0: $(cat "$tmp/tp3.txt")"
grep -qx '  tp=2 (ranks 2, 5): 1896 bytes' "$tmp/tp3.txt" || fail "tp3 bytes tp=2: $(cat "$tmp/tp3.txt")"
grep -q '^  u1.l1.weight .* \[3, 8\]  \[3, 8\]  \[2, 8\]$' "$tmp/tp3.txt" || fail "tp3 shapes: $(cat "$tmp/tp3.txt")"

# --- errors -----------------------------------------------------------------
# Each case: a substring of the message | the plan (exit 1 on the seed model).
while IFS='|' read -r needle plan; do
  echo "$plan" >"$tmp/p.json"
  expect_err 1 "$needle" --model "$seed" --plan "$tmp/p.json"
done <<'CASES'
pattern "u1.nope" matches no module|{"mesh": {"dp": 1, "tp": 2}, "tp": {"u1.nope": "colwise"}}
pattern "u1.l1" matches only modules an earlier pattern|{"mesh": {"dp": 1, "tp": 2}, "tp": {"*.l1": "colwise", "u1.l1": "rowwise"}}
no module named "u3", "u1.x"|{"mesh": {"dp": 2}, "units": ["u3", "u1", "u1.x"]}
"u1" listed twice|{"mesh": {"dp": 2}, "units": ["u1", "u1"]}
not valid JSON|{"mesh": {"dp": 2}, "units": [
missing "mesh"|{"units": [""]}
mesh.dp must be a positive integer|{"mesh": {"dp": 0}}
no dim named "tp"|{"mesh": {"dp": 2}, "tp": {"u1.l1": "colwise"}}
tp."u1.l1": style must be one of|{"mesh": {"tp": 2}, "tp": {"u1.l1": "diagonal"}}
unknown key "unit"|{"mesh": {"tp": 2}, "unit": [""]}
"units" must be an array|{"mesh": {"tp": 2}, "units": "u1"}
CASES
expect_err 1 '/nonexistent_plan.json' --model "$seed" --plan /nonexistent_plan.json
expect_err 2 '--plan is required' --model "$seed"
expect_err 2 '--model is required' --plan "$tp_plan"
expect_err 2 "unknown argument '--bogus'" --model "$seed" --plan "$tp_plan" --bogus
expect_err 2 'bad --limits-bytes' --model "$seed" --plan "$tp_plan" --limits-bytes 0,5
"$tpdp" plan --help >"$tmp/help" 2>&1 || fail "--help exit $?"
grep -q '^usage: tpdp plan --model' "$tmp/help" || fail "--help text: $(cat "$tmp/help")"

if [ "$fails" -gt 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all plan CLI checks passed"
