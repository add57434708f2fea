#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# `tpdp partition` end to end: exact --json output on hand-worked cases
# (worked in tests/tools/partition_test.cc and docs/model-format.md), exit
# statuses, and the messages of impossible requests.
# The greedy method's expected stages are worked by hand from PyTorch's fx shard_model in
# tests/tools/planning/partition_test.cc (same models, same K).
# usage: partition_cli_test.sh TPDP SEED000_MODEL TIED_MODEL EDGES_U1_L2
#        REPEATED_CALL_MODEL
set -u
tpdp=$1 seed=$2 tied=$3 edges=$4 repeated=$5
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

# Greedy (PyTorch's fx shard_model): K = 4 gives 3 stages (threshold 576 // 4 = 144, a cut
# after the call that goes above it; u1.seq.2 opens stage 1).
expect_out 0 '{"method":"greedy","threshold":144,"stages":[{"modules":["l1","u1.l1","u1.seq.0","u1.seq.1"],"nodes":["l1","u1_l1","u1_seq_0","u1_seq_1"],"params":216},{"modules":["u1.seq.2","u1.l2","u2.l1","u2.seq.0","u2.seq.1"],"nodes":["u1_seq_2","u1_l2","u2_l1","u2_seq_0","u2_seq_1"],"params":216},{"modules":["u2.seq.2","u2.l2","l2"],"nodes":["u2_seq_2","u2_l2","l2"],"params":144}],"max_stage_params":216}' \
  --model "$seed" --stages 4 --method greedy --json
# The skip edge u1 -> l2 merges stages 1 and 2.
expect_out 0 '{"method":"greedy","threshold":144,"stages":[{"modules":["l1","u1.l1","u1.seq.0","u1.seq.1"],"nodes":["l1","u1_l1","u1_seq_0","u1_seq_1"],"params":216},{"modules":["u1.seq.2","u1.l2","u2.l1","u2.seq.0","u2.seq.1","u2.seq.2","u2.l2","l2"],"nodes":["u1_seq_2","u1_l2","u2_l1","u2_seq_0","u2_seq_1","u2_seq_2","u2_l2","l2"],"params":360}],"max_stage_params":360}' \
  --model "$seed" --stages 4 --method=greedy --edges "$edges" --json
# Repeated calls: cell_1 and cell_2 count cell's 72 again; 4 stages for K = 2.
expect_out 0 '{"method":"greedy","threshold":65,"stages":[{"modules":["embed","cell"],"nodes":["embed","cell"],"params":112},{"modules":["act","cell"],"nodes":["act","cell_1"],"params":72},{"modules":["act","cell"],"nodes":["act_1","cell_2"],"params":72},{"modules":["act","head"],"nodes":["act_2","head"],"params":18}],"max_stage_params":112}' \
  --model "$repeated" --stages 2 --method greedy --json
# ... while the optimal method splits the 4 leaves, each once: 40 | 90.
expect_out 0 '{"stages":[{"modules":["embed"],"params":40},{"modules":["cell","act","head"],"params":90}],"max_stage_params":90}' \
  --model "$repeated" --stages 2 --json
# Tied model K = 3: head counts its tied weight (50), blocks.1.act opens the
# last stage.
expect_out 0 '{"method":"greedy","threshold":30,"stages":[{"modules":["emb"],"nodes":["emb"],"params":40},{"modules":["blocks.0.fc","blocks.0.act","blocks.1.fc"],"nodes":["blocks_0_fc","blocks_0_act","blocks_1_fc"],"params":40},{"modules":["blocks.1.act","head"],"nodes":["blocks_1_act","head"],"params":50}],"max_stage_params":50}' \
  --model "$tied" --stages 3 --method greedy --json
"$tpdp" partition --model "$repeated" --stages 2 --method greedy >"$tmp/gtext" 2>&1 || fail "greedy text failed: $(cat "$tmp/gtext")"
grep -qx 'stage 1: 72 params, 2 calls' "$tmp/gtext" || fail "greedy text stage 1: $(cat "$tmp/gtext")"
grep -q '^  cell  *cell_1  *72  Linear$' "$tmp/gtext" || fail "greedy text call line: $(cat "$tmp/gtext")"
grep -q '4 stages, threshold 65' "$tmp/gtext" || fail "greedy text header: $(cat "$tmp/gtext")"
# Any K >= 1 for greedy (13 > 12 leaves: 8 stages); K = 0 is refused.
"$tpdp" partition --model "$seed" --stages 13 --method greedy --json >"$tmp/g13" 2>&1 || fail "greedy K=13: $(cat "$tmp/g13")"
[ "$(grep -o '"params"' "$tmp/g13" | wc -l)" = 8 ] || fail "greedy K=13 stages: $(cat "$tmp/g13")"
expect_err 1 'planning_partition_greedy: the number of stages is 0' --model "$seed" --stages 0 --method greedy
expect_err 2 "--method 'fastest' is not optimal or greedy" --model "$seed" --stages 2 --method fastest

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
expect_err 1 "tpdp partition: planning_partition_edges_load: $tmp/bad_edges.json: edges[0][1]" --model "$seed" --stages 2 --edges "$tmp/bad_edges.json"
echo '{"class": "M", "children": {"a": {"class": "L"}}, "calls": ["b"]}' >"$tmp/bad_calls.json"
expect_err 1 "tpdp partition: planning_model_desc_load: $tmp/bad_calls.json: calls[0]: no module named \"b\"" --model "$tmp/bad_calls.json" --stages 1

# Usage errors: exit 2.
expect_err 2 "--stages 'four' is not an integer" --model "$seed" --stages four
expect_err 2 "--stages '99999999999' is too large (max 2147483647)" --model "$seed" --stages 99999999999
expect_err 2 "--stages '-99999999999' is too small (min -2147483648)" --model "$seed" --stages -99999999999
expect_err 2 '--model is required' --stages 2
expect_err 2 '--stages is required' --model "$seed"
expect_err 2 "unknown argument '--frobnicate'" --model "$seed" --stages 2 --frobnicate
expect_err 2 'needs a value' --model "$seed" --stages
"$tpdp" partition --help >"$tmp/help" || fail "--help exit"
grep -q 'usage: tpdp partition' "$tmp/help" || fail "--help"
grep -q '^greedy: PyTorch.s torch.fx shard_model' "$tmp/help" || fail "--help lacks the greedy method: $(cat "$tmp/help")"

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "all partition CLI checks passed"
