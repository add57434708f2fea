#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# `tpdp ckpt` end to end: a checkpoint saved on 2 ranks (crash_helper: w
# [32768, 16] f32 sharded S0 over tp=2, b [5] plain) is inspected as text
# and JSON, verified, consolidated (the file is then parsed here with
# Python's json and struct, independently of tpdp), and a flipped byte is
# reported by --verify naming the file and the tensor.
# Usage: ckpt_cli_test.sh TPDP CRASH_HELPER
set -u
tpdp="$1"
helper="$2"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir="${TEST_TMPDIR:-/tmp}/ckptcli.$$"
rm -rf "$dir"
fail=0
expect() { # what, pattern, text
  if echo "$3" | grep -q -- "$2"; then
    echo "ok: $1"
  else
    echo "FAILED: $1: no '$2' in:"
    echo "$3" | head -20
    fail=1
  fi
}
mpirun -np 2 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
  --timeout 120 "$helper" save "$dir" 4 || { echo "FAILED: save"; exit 1; }

out=$("$tpdp" ckpt inspect "$dir" 2>&1)
expect "inspect header" "generation 1, saved by 2 ranks, 2 tensors in 3 slices, 2097172 bytes" "$out"
expect "inspect metadata" "value = 4" "$out"
expect "inspect tensor" "^w f32 \[32768, 16\] on tp=2 (S0): 2 slices, 2097152 bytes" "$out"
expect "inspect slice" "slice 1: \[16384, 16\] at \[16384, 0\], model-g000001-00002-of-00002.safetensors, 1048576 bytes, xxh64 [0-9a-f]\{16\}, rank 1, checksum unchecked" "$out"
expect "inspect plain" "^b f32 \[5\] on no spec" "$out"

out=$("$tpdp" ckpt inspect "$dir" --verify 2>&1)
rc=$?
expect "verify ok (exit $rc)" "checksums: 0 of 3 slices bad" "$out"
[ $rc = 0 ] || fail=1

"$tpdp" ckpt inspect --json --verify "$dir" > "$dir.json" || fail=1
python3 - "$dir.json" <<'PY' && echo "ok: json" || { echo "FAILED: json"; fail=1; }
import json, sys
j = json.load(open(sys.argv[1]))
assert j["generation"] == 1 and j["world_size"] == 2, j
assert j["metadata"] == {"value": "4"}, j["metadata"]
w = j["tensors"][0]
assert w["name"] == "w" and w["shape"] == [32768, 16], w
assert w["mesh"] == {"shape": [2], "names": ["tp"]} and w["placements"] == ["S0"], w
assert [s["offsets"] for s in w["slices"]] == [[0, 0], [16384, 0]]
assert all(s["checksum"] == "ok" for t in j["tensors"] for s in t["slices"])
assert j["tensors"][1]["mesh"] is None and j["bad_slices"] == 0
PY

out=$("$tpdp" ckpt consolidate "$dir" "$dir/all.safetensors" 2>&1)
expect "consolidate" "wrote $dir/all.safetensors" "$out"
python3 - "$dir/all.safetensors" <<'PY' && echo "ok: consolidated file" || { echo "FAILED: consolidated file"; fail=1; }
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
h = json.loads(data[8:8 + n])
assert h["__metadata__"] == {"format": "pt", "value": "4"}, h["__metadata__"]
assert h["w"] == {"dtype": "F32", "shape": [32768, 16], "data_offsets": [0, 2097152]}, h["w"]
assert h["b"] == {"dtype": "F32", "shape": [5], "data_offsets": [2097152, 2097172]}, h["b"]
body = data[8 + n:]
assert len(body) == 2097172
w = struct.unpack("<524288f", body[:2097152])
assert all(w[k] == 4 + k % 1000 for k in range(0, 524288, 997)), "w values"
assert struct.unpack("<5f", body[2097152:]) == (40, 41, 42, 43, 44)
PY

# Flip one byte inside w's second slice.
python3 - "$dir/model-g000001-00002-of-00002.safetensors" <<'PY'
import struct, sys
p = sys.argv[1]
f = open(p, "r+b")
n = struct.unpack("<Q", f.read(8))[0]
f.seek(8 + n + 1000)
b = f.read(1)
f.seek(8 + n + 1000)
f.write(bytes([b[0] ^ 1]))
PY
out=$("$tpdp" ckpt inspect "$dir" --verify 2>&1)
rc=$?
expect "verify finds the flipped byte (exit $rc)" "checksum bad: .*model-g000001-00002-of-00002.safetensors': tensor 'w'.*corrupt" "$out"
expect "verify counts it" "checksums: 1 of 3 slices bad" "$out"
[ $rc = 1 ] || { echo "FAILED: exit $rc, expected 1"; fail=1; }

"$tpdp" ckpt inspect > /dev/null 2>&1
[ $? = 2 ] && echo "ok: usage error" || { echo "FAILED: usage exit"; fail=1; }
out=$("$tpdp" ckpt inspect "$dir/none" 2>&1)
expect "missing checkpoint" "cannot open.*index.json" "$out"
rm -rf "$dir" "$dir.json"
exit $fail
