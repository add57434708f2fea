#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The layering check: breaking DESIGN.md's layering must be a build error.
# tests/layering/<layer>/ is a probe package with the rights of that layer
# (tpdp.bzl's tpdp_layer_visibility grants each probe what its layer gets;
# the //:tests package group leaves the probes out of the tests' rights).
# Its targets tagged manual each break one rule: this script builds them
# and passes only where Bazel refuses each for the reason expected (a
# visibility error naming the dependency, or comm/backend.h's #error), and
# where the probes' `ok` targets (what each layer may use) build.
#
# Bazel cannot run inside a Bazel test (the server is busy running the
# test), so this runs beside `bazel test`: scripts/run-tests calls it after
# the tests and counts each probe as a test case (--xml writes them as a
# JUnit file for scripts/summarize-tests).
# Usage: tests/layering/check.sh [--xml FILE] [bazel build flags...]
set -uo pipefail
cd "$(dirname "$0")/../.."
xml=""
if [ "${1:-}" = "--xml" ]; then
  xml=$2
  shift 2
fi
BAZEL="${BAZEL:-bazel}"
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

# probe (package:target under tests/layering/) and the dependency Bazel
# must refuse it.
visibility=(
  "core:uses_comm //comm:comm"
  "core:uses_tp //tp:tp"
  "core:uses_dp //dp:dp"
  "core:uses_tools //tools/planning:planning"
  "core:uses_examples //examples:common"
  "comm:uses_topo //topo:topo"
  "comm:uses_tp //tp:tp"
  "comm:uses_dp //dp:dp"
  "comm:uses_ckpt //ckpt:ckpt"
  "topo:uses_tp //tp:tp"
  "topo:uses_dp //dp:dp"
  "tp:uses_dp //dp:dp"
  "tp:uses_ckpt //ckpt:ckpt"
  "tp:uses_backend //comm:backend"
  "tp:uses_tools //tools/planning:planning"
  "dp:uses_tp //tp:tp"
  "dp:uses_ckpt //ckpt:ckpt"
  "dp:uses_backend //comm:backend"
  "ckpt:uses_dp //dp:dp"
)
# Probes that must fail to compile, and the compiler's message.
compile=(
  "tp:includes_backend|comm/backend.h is comm/'s backend interface: include comm/services.h"
)

names=()
results=() # "" for a pass, else why it failed
record() { names+=("$1"); results+=("$2"); }

# Every manual target of the probes is listed above: a probe added without
# a line here would never be checked.
listed=$(for v in "${visibility[@]}"; do echo "//tests/layering/${v%% *}"; done
  for c in "${compile[@]}"; do echo "//tests/layering/${c%%|*}"; done)
found=$($BAZEL query 'attr(tags, "manual", //tests/layering/...)' 2>"$log/query.err")
if [ -z "$found" ]; then
  record "probes listed" "bazel query found no probe: $(tail -3 "$log/query.err")"
else
  extra=$(comm -13 <(echo "$listed" | sort) <(echo "$found" | sort))
  missing=$(comm -23 <(echo "$listed" | sort) <(echo "$found" | sort))
  record "probes listed" "${extra:+not checked here: $extra }${missing:+no such probe: $missing}"
fi

# The visibility probes, analysed together (--nobuild: analysis is where
# visibility is checked).
labels=()
for v in "${visibility[@]}"; do labels+=("//tests/layering/${v%% *}"); done
$BAZEL build --nobuild --keep_going "$@" "${labels[@]}" >"$log/vis.log" 2>&1
for v in "${visibility[@]}"; do
  probe=${v%% *} dep=${v#* }
  want="target '$dep' is not visible from target '//tests/layering/$probe'"
  if grep -qF "$want" "$log/vis.log"; then
    record "$probe" ""
  else
    record "$probe" "Bazel did not refuse it with \"$want\""
  fi
done

for c in "${compile[@]}"; do
  probe=${c%%|*} want=${c#*|}
  if $BAZEL build "$@" "//tests/layering/$probe" >"$log/compile.log" 2>&1; then
    record "$probe" "it compiled; it must not"
  elif grep -qF "$want" "$log/compile.log"; then
    record "$probe" ""
  else
    record "$probe" "it failed without \"$want\": $(grep -m3 -i error "$log/compile.log")"
  fi
done

# What the layers may use builds (the probes are not broken themselves).
if $BAZEL build "$@" //tests/layering/... >"$log/ok.log" 2>&1; then
  record "allowed dependencies build" ""
else
  record "allowed dependencies build" "$(grep -m5 ERROR "$log/ok.log")"
fi

failed=0
for i in "${!names[@]}"; do
  if [ -z "${results[$i]}" ]; then
    echo "layering: PASS ${names[$i]}"
  else
    echo "layering: FAIL ${names[$i]}: ${results[$i]}"
    failed=$((failed + 1))
  fi
done
if [ -n "$xml" ]; then
  python3 - "$xml" "${names[@]}" -- "${results[@]}" <<'PY'
import sys
from xml.sax.saxutils import quoteattr
args = sys.argv[2:]
cut = args.index("--")
names, results = args[:cut], args[cut + 1:]
with open(sys.argv[1], "w") as f:
    f.write('<?xml version="1.0"?>\n<testsuites><testsuite name="layering">\n')
    for n, r in zip(names, results):
        f.write("<testcase name=%s>" % quoteattr(n))
        if r:
            f.write("<failure message=%s/>" % quoteattr(r))
        f.write("</testcase>\n")
    f.write("</testsuite></testsuites>\n")
PY
fi
echo "layering: ${#names[@]} checks, $failed failed"
[ "$failed" = 0 ]
