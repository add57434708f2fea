#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# `tpdp shard` contract: exact --json text, table header, exit 2 + message.
set -u
bin="$1"
fail=0
check() { if [ "$2" != "$3" ]; then echo "FAIL $1"; echo " got:  $2"; echo " want: $3"; fail=1; fi; }
# 10x7 over 2x3 with S0,R: rows 5 each, offsets 0 and 5 (worked by hand).
want='{"ranks":[{"rank":0,"coords":[0,0],"local_shape":[5,7],"global_offset":[0,0]},{"rank":1,"coords":[0,1],"local_shape":[5,7],"global_offset":[0,0]},{"rank":2,"coords":[0,2],"local_shape":[5,7],"global_offset":[0,0]},{"rank":3,"coords":[1,0],"local_shape":[5,7],"global_offset":[5,0]},{"rank":4,"coords":[1,1],"local_shape":[5,7],"global_offset":[5,0]},{"rank":5,"coords":[1,2],"local_shape":[5,7],"global_offset":[5,0]}]}'
check json "$("$bin" shard --shape 10,7 --mesh 2,3 --placements S0,R --json)" "$want"
# 5 over 4 on dim 1: 2,2,1,0 with offsets 0,2,4,5.
want='{"ranks":[{"rank":0,"coords":[0],"local_shape":[3,2],"global_offset":[0,0]},{"rank":1,"coords":[1],"local_shape":[3,2],"global_offset":[0,2]},{"rank":2,"coords":[2],"local_shape":[3,1],"global_offset":[0,4]},{"rank":3,"coords":[3],"local_shape":[3,0],"global_offset":[0,5]}]}'
check uneven "$("$bin" shard --shape 3,5 --mesh 4 --placements S1 --json)" "$want"
out=$("$bin" shard --shape 10,7 --mesh 2,3 --placements P:avg,R)
check table_rows "$(echo "$out" | wc -l)" "7"
check table_head "$(echo "$out" | head -1 | tr -s ' ')" "rank coords local_shape global_offset"
for bad in "S2,R" "S0" "S0,X"; do
  err=$("$bin" shard --shape 10,7 --mesh 2,3 --placements "$bad" 2>&1 >/dev/null); rc=$?
  check "rc $bad" "$rc" "2"
  [ -n "$err" ] || { echo "FAIL no message for $bad"; fail=1; }
done
err=$("$bin" shard --shape 10,7 --mesh 2,3 --placements S2,R 2>&1); check msg_shard "$(echo "$err" | grep -c 'Shard(2)')" "1"
exit $fail
