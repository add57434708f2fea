#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# libtpdp.so's interface: it exports exactly the functions the public
# headers declare with TPDP_API (nothing internal leaks past
# -fvisibility=hidden, nothing declared is missing), its SONAME is
# libtpdp.so.<TPDP_VERSION_MAJOR of core.h>, and it does not need
# libstdc++ (a C library; a C++ runtime would tie frameworks to one).
# usage: exports_test.sh LIBTPDP_SO HEADER...   (include/tpdp/*.h)
set -euo pipefail
so=$1
shift
fail=0
bad() {
  echo "exports_test: FAILED: $*" >&2
  fail=1
}

# Names declared with TPDP_API: continuation lines joined, preprocessor
# lines and comments dropped, the text cut into declarations at ; { }, and
# in each one with TPDP_API the identifier before its first '('.
declared=$(cat "$@" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta' |
  grep -v '^[[:space:]]*#' | tr '\n' ' ' |
  sed -E 's:/\*([^*]|\*+[^*/])*\*+/: :g' | tr ';{}' '\n\n\n' |
  grep -w TPDP_API | sed -E 's/\(.*//' |
  grep -oE '[A-Za-z_][A-Za-z0-9_]*[[:space:]]*$' | tr -d ' ' | sort -u)
[ "$(echo "$declared" | wc -l)" -gt 50 ] ||
  bad "found only $(echo "$declared" | wc -l) TPDP_API declarations in $*"
# The linker's own symbols are not tpdp's.
exported=$(nm -D -g --defined-only "$so" | awk '{ print $NF }' |
  grep -vxE '__bss_start|_edata|_end' | sort -u)
extra=$(comm -23 <(echo "$exported") <(echo "$declared"))
[ -z "$extra" ] ||
  bad "libtpdp.so exports symbols no public header declares:" $extra
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
[ -z "$missing" ] ||
  bad "declared with TPDP_API but not exported by libtpdp.so:" $missing

core_h=
for h in "$@"; do
  case $h in */core.h) core_h=$h ;; esac
done
major=$(sed -n 's/^#define TPDP_VERSION_MAJOR \([0-9]*\)$/\1/p' "$core_h")
dyn=$(readelf -d "$so")
soname=$(echo "$dyn" | sed -n 's/.*(SONAME).*\[\(.*\)\]$/\1/p')
[ -n "$major" ] && [ "$soname" = "libtpdp.so.$major" ] ||
  bad "SONAME is '$soname', TPDP_VERSION_MAJOR '$major' wants libtpdp.so.$major (the root BUILD's -soname)"
if echo "$dyn" | grep -q "(NEEDED).*libstdc++"; then
  bad "libtpdp.so needs libstdc++"
fi
[ $fail = 0 ] || exit 1
echo "exports_test: ok ($(echo "$exported" | wc -l) symbols, SONAME $soname)"
