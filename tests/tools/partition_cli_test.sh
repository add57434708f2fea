#!/bin/bash
# `tpdp partition` end to end: exact --json output on hand-worked cases
# (worked in tests/tools/partition_test.cc and docs/model-format.md), exit
# statuses, and the messages of impossible requests.
# usage: partition_cli_test.sh TPDP SEED000_MODEL TIED_MODEL EDGES_U1_L2
set -u
tpdp=$1 seed=$2 tied=$3 edges=$4
fails=0
tmp=${TEST_TMPDIR:-/tmp}

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect_out WANT_RC WANT_STDOUT ARGS...: exact stdout and exit status.
expect_out() {
  local want_rc=$1 want=$2
  shift 2
  local got rc
  got=$("$tpdp" partition "$@" 2>"$tmp/err")
  rc=$?
  [ "$rc" = "$want_rc" ] || fail "tpdp partition $*: exit $rc, want $want_rc ($(cat "$tmp/err"))"
  [ "$got" = "$want" ] || fail "tpdp partition $*:
got:  $got
want: $want"
}

# expect_err WANT_RC NEEDLE ARGS...: exit status and a substring of stderr.
expect_err() {
  local want_rc=$1 needle=$2
  shift 2
  "$tpdp" partition "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" = "$want_rc" ] || fail "tpdp partition $*: exit $rc, want $want_rc"
  grep -qF -- "$needle" "$tmp/err" || fail "tpdp partition $*: stderr lacks '$needle': $(cat "$tmp/err")"
}

expect_out 0 '{"stages":[{"modules":["l1","u1.l1","u1.seq.0"],"params":144},{"modules":["u1.seq.1","u1.seq.2","u1.l2"],"params":144},{"modules":["u2.l1","u2.seq.0","u2.seq.1","u2.seq.2"],"params":144},{"modules":["u2.l2","l2"],"params":144}],"max_stage_params":144}' \
  --model "$seed" --stages 4 --json

expect_out 0 '{"stages":[{"modules":["l1","u1.l1","u1.seq.0","u1.seq.1"],"params":216},{"modules":["u1.seq.2"],"params":0},{"modules":["u1.l2","u2.l1","u2.seq.0","u2.seq.1","u2.seq.2"],"params":216},{"modules":["u2.l2","l2"],"params":144}],"max_stage_params":216}' \
  --model "$seed" --stages=4 --edges "$edges" --json

expect_out 0 '{"stages":[{"modules":["emb"],"params":41},{"modules":["blocks.0.fc","blocks.0.act","blocks.1.fc","blocks.1.act"],"params":40},{"modules":["head"],"params":10}],"max_stage_params":41}' \
  --json --model "$tied" --stages 3

expect_out 0 '{"stages":[{"modules":["l1","u1.l1","u1.seq.0","u1.seq.1","u1.seq.2","u1.l2","u2.l1","u2.seq.0","u2.seq.1","u2.seq.2","u2.l2","l2"],"params":576}],"max_stage_params":576}' \
  --model "$seed" --stages 1 --json

# Text form.
"$tpdp" partition --model "$seed" --stages 4 >"$tmp/text" 2>&1 || fail "text form failed: $(cat "$tmp/text")"
grep -qx 'stage 3: 144 params, 2 modules' "$tmp/text" || fail "text lacks stage 3 line: $(cat "$tmp/text")"
grep -qx 'max stage params: 144' "$tmp/text" || fail "text lacks max line: $(cat "$tmp/text")"
grep -q '^  u2.seq.1 .* 72  Linear$' "$tmp/text" || fail "text lacks module line: $(cat "$tmp/text")"

# Impossible requests: exit 1 with the reason.
expect_err 1 'edges[0] ["u1", "l2"]' --model "$seed" --stages 8 --edges "$edges"
expect_err 1 'at most 7 stages' --model "$seed" --stages 8 --edges "$edges"
expect_err 1 'cannot split 12 leaf modules into 13' --model "$seed" --stages 13
expect_err 1 'cannot split 12 leaf modules into 0' --model "$seed" --stages 0
expect_err 1 '/nonexistent.json' --model /nonexistent.json --stages 2
echo '[["u1", "nope"]]' >"$tmp/bad_edges.json"
expect_err 1 'no module named "nope"' --model "$seed" --stages 2 --edges "$tmp/bad_edges.json"

# Usage errors: exit 2.
expect_err 2 'not an integer' --model "$seed" --stages four
expect_err 2 '--model is required' --stages 2
expect_err 2 '--stages is required' --model "$seed"
expect_err 2 "unknown argument '--frobnicate'" --model "$seed" --stages 2 --frobnicate
expect_err 2 'needs a value' --model "$seed" --stages
"$tpdp" partition --help | grep -q 'usage: tpdp partition' || fail "--help"

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "all partition CLI checks passed"
