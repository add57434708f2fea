#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# `tpdp buckets` CLI contract: exact JSON, table, exit codes.
set -u
bin="$1"
fail=0
check() {  # check NAME EXPECTED ACTUAL
  if [ "$2" != "$3" ]; then echo "FAIL $1: expected [$2] got [$3]"; fail=1; else echo "ok $1"; fi
}
out=$("$bin" buckets --json f32:1000 f16:300 f32:100); rc=$?
check json_default '{"buckets":[{"params":[0,2],"bytes":4400,"limit":1048576},{"params":[1],"bytes":600,"limit":1048576}]}' "$out"
check json_rc 0 "$rc"
# limits 100,1000 (hand-worked: see bucket_assign_test LimitListAdvances...)
out=$("$bin" buckets --json --limits-bytes 100,1000 f32:30 f32:100 f32:150 f32:300 f32:1)
check json_limits '{"buckets":[{"params":[0],"bytes":120,"limit":100},{"params":[1,2],"bytes":1000,"limit":1000},{"params":[3],"bytes":1200,"limit":1000},{"params":[4],"bytes":4,"limit":1000}]}' "$out"
out=$("$bin" buckets --limits-bytes=1000 --json i64:100 u8:5 bf16:600 f64:1 i32:1)
check json_dtypes '{"buckets":[{"params":[0],"bytes":800,"limit":1000},{"params":[1],"bytes":5,"limit":1000},{"params":[2],"bytes":1200,"limit":1000},{"params":[3],"bytes":8,"limit":1000},{"params":[4],"bytes":4,"limit":1000}]}' "$out"
out=$("$bin" buckets f32:200000 f32:200000 f32:100000); rc=$?
check table_rc 0 "$rc"
echo "$out" | grep -Eq '^0 +f32 +1600000 +1048576 +0,1$' || { echo "FAIL table row 0: $out"; fail=1; }
echo "$out" | grep -Eq '^1 +f32 +400000 +26214400 +2$' || { echo "FAIL table row 1: $out"; fail=1; }
bad() {  # bad NAME SUBSTRING ARGS...
  local name="$1" sub="$2"; shift 2
  err=$("$bin" buckets "$@" 2>&1 >/dev/null); rc=$?
  check "$name.rc" 2 "$rc"
  case "$err" in *"$sub"*) echo "ok $name.msg";; *) echo "FAIL $name.msg: [$err] lacks [$sub]"; fail=1;; esac
}
bad no_tensors "no tensors given"
bad bad_dtype "unknown dtype in 'f8:10'" f8:10
bad no_colon "expected DTYPE:NUMEL" f32
bad bad_numel "bad element count in 'f32:-3'" f32:-3
bad bad_numel2 "bad element count in 'f32:1x'" f32:1x
bad zero_limit "limits must be > 0" --limits-bytes 0 f32:1
bad empty_limit "bad --limits-bytes value '(empty)'" --limits-bytes 10,,20 f32:1
bad missing_limit "needs a value" f32:1 --limits-bytes
bad unknown_opt "unknown option '--frobnicate'" --frobnicate f32:1
"$bin" buckets --help | grep -q "usage: tpdp buckets" || { echo "FAIL help"; fail=1; }
exit $fail
