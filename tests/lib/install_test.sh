#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# scripts/install-lib into a temporary prefix, then a framework's view of
# it, outside Bazel: the consumer (consumer.c) built with README's command
#   cc consumer.c $(pkg-config --cflags --libs tpdp)
# and run on 2 MPI ranks; the same program linked against libtpdp.a with
# `pkg-config --static`, run on 2 ranks; every object of libtpdp.a linked
# with no undefined symbol left. Bazel cannot run inside a Bazel test, so
# the library comes prebuilt (install-lib --prebuilt).
# usage: install_test.sh INSTALL_LIB LIBTPDP_SO LIBTPDP_A CORE_H CONSUMER_C
set -euo pipefail
install_lib=$(readlink -f "$1")
so=$(readlink -f "$2")
ar=$(readlink -f "$3")
inc=$(dirname "$(dirname "$(readlink -f "$4")")") # .../include
consumer=$(readlink -f "$5")
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/install_test.XXXXXX")
prefix=$tmp/prefix
fail() {
  echo "install_test: FAILED: $*" >&2
  exit 1
}

# A sanitizer build (--config=asan) links libasan into libtpdp.so: not a
# library a framework would install, and install-lib refuses it. Reported
# skipped, with the reason, in the test's XML.
san=$(readelf -d "$so" |
  sed -n 's/.*NEEDED.*\[\(lib[a-z]*san\.so[^]]*\)\].*/\1/p')
if [ -n "$san" ]; then
  reason="libtpdp.so is a sanitizer build (it needs ${san%%$'\n'*}): not installable"
  echo "install_test: skipped: $reason"
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    printf '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites><testsuite name="install_test" tests="1" failures="0" skipped="1"><testcase name="InstallAndConsume" status="notrun" result="skipped"><skipped message="%s"/></testcase></testsuite></testsuites>\n' \
      "$reason" >"$XML_OUTPUT_FILE"
  fi
  exit 0
fi

# ------------------------------------------------------------ install
bash "$install_lib" --prebuilt "$so" "$ar" "$inc" "$prefix" ||
  fail "install-lib --prebuilt exited $?"
part() { sed -n "s/^#define TPDP_VERSION_$1 \([0-9]*\)\$/\1/p" "$inc/tpdp/core.h"; }
major=$(part MAJOR)
version=$major.$(part MINOR).$(part PATCH)
lib=$prefix/lib
[ -f "$lib/libtpdp.so.$version" ] && [ ! -L "$lib/libtpdp.so.$version" ] ||
  fail "no file lib/libtpdp.so.$version"
[ "$(readlink "$lib/libtpdp.so.$major")" = "libtpdp.so.$version" ] ||
  fail "lib/libtpdp.so.$major does not point at libtpdp.so.$version"
[ "$(readlink "$lib/libtpdp.so")" = "libtpdp.so.$major" ] ||
  fail "lib/libtpdp.so does not point at libtpdp.so.$major"
cmp -s "$so" "$lib/libtpdp.so.$version" || fail "installed .so differs"
cmp -s "$ar" "$lib/libtpdp.a" || fail "installed libtpdp.a differs"
for h in "$inc"/tpdp/*.h; do
  cmp -s "$h" "$prefix/include/tpdp/$(basename "$h")" ||
    fail "include/tpdp/$(basename "$h") missing or different"
done
[ "$(ls "$prefix/include/tpdp" | wc -l)" = "$(ls "$inc"/tpdp/*.h | wc -l)" ] ||
  fail "include/tpdp holds other files than the public headers"

export PKG_CONFIG_PATH=$lib/pkgconfig
[ "$(pkg-config --modversion tpdp)" = "$version" ] ||
  fail "pkg-config --modversion tpdp: '$(pkg-config --modversion tpdp)', want $version"
requires=$(pkg-config --print-requires-private tpdp)
for mod in ompi-c hwloc libcjson; do
  echo "$requires" | grep -q "^$mod >= " ||
    fail "Requires.private lacks $mod (has: $(echo $requires))"
done
[ "$(pkg-config --libs tpdp | xargs)" = "-L$lib -ltpdp" ] ||
  fail "pkg-config --libs tpdp: '$(pkg-config --libs tpdp)'"

# A wrong SONAME is refused: a header set claiming ABI major 7.
mkdir -p "$tmp/inc7/tpdp"
cp "$inc"/tpdp/*.h "$tmp/inc7/tpdp/"
sed -i 's/^#define TPDP_VERSION_MAJOR .*/#define TPDP_VERSION_MAJOR 7/' \
  "$tmp/inc7/tpdp/core.h"
if out=$(bash "$install_lib" --prebuilt "$so" "$ar" "$tmp/inc7" "$tmp/p7" 2>&1); then
  fail "install-lib accepted SONAME libtpdp.so.$major with TPDP_VERSION_MAJOR 7"
fi
echo "$out" | grep -q "TPDP_VERSION_MAJOR 7 wants libtpdp.so.7" ||
  fail "install-lib's refusal does not say why: $out"
[ ! -e "$tmp/p7" ] || fail "install-lib wrote into the prefix before refusing"

# ------------------------------------------------------------ consumer
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
run2() { # a program on 2 ranks; both must say ok
  local out
  out=$(mpirun -np 2 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
    --timeout 300 "$@" 2>&1) || {
    echo "$out" >&2
    fail "mpirun -np 2 $* exited non-zero"
  }
  echo "$out"
  for r in 0 1; do
    echo "$out" | grep -qx "consumer: rank $r ok" || fail "rank $r did not say ok"
  done
}
cd "$tmp"
cp "$consumer" consumer.c
# README's command, as a framework's build would run it.
cc consumer.c $(pkg-config --cflags --libs tpdp) || fail "cc against libtpdp.so"
readelf -d a.out | grep -q "(NEEDED).*\[libtpdp.so.$major\]" ||
  fail "a.out does not need libtpdp.so.$major"
LD_LIBRARY_PATH=$lib run2 ./a.out

# libtpdp.a: Libs.private and Requires.private are complete for a static
# link of tpdp (its dependencies stay shared).
static_libs=$(pkg-config --static --libs tpdp)
cc consumer.c $(pkg-config --cflags tpdp) ${static_libs/-ltpdp/-l:libtpdp.a} \
  -o consumer_static || fail "cc against libtpdp.a with pkg-config --static"
if readelf -d consumer_static | grep -q "(NEEDED).*libtpdp"; then
  fail "consumer_static needs libtpdp.so"
fi
run2 ./consumer_static
# Every object of the archive, not only those the consumer pulls in.
cc -shared -o whole.so -Wl,--whole-archive "$lib/libtpdp.a" \
  -Wl,--no-whole-archive -Wl,-z,defs ${static_libs/-ltpdp/} ||
  fail "libtpdp.a leaves symbols undefined (an object missing from the archive?)"
echo "install_test: ok (tpdp $version in $prefix)"
