# SPDX-License-Identifier: BSD-3-Clause
# shellcheck shell=bash disable=SC2034 # its variables are for the benches
# The prologue every bench/*.sh shares, sourced first:
#   . "$(dirname "$0")/common.sh"
# It moves to the repository's root, exports Open MPI's run-as-root
# variables, and defines:
#   bench_build TARGET...  bazel build (with $BAZEL_FLAGS) of the targets,
#                          quiet unless it fails (then again, Bazel's output
#                          shown); sets $bench_bin to that configuration's
#                          bazel-bin folder
#   bench_tmpdir           a temporary folder in $bench_tmp, removed at exit
#   bench_tokens FILE      an llm.c token file of README.md and
#                          DEVELOPERS.md (scripts/make-tokens), the text the
#                          GPT-2 benches train on
#   bench_mpirun           (array) mpirun for more ranks than cores: no
#                          binding (the ranks share the cores), and waiting
#                          ranks yield their core (spinning, two ranks on two
#                          busy cores slow each other down)
#   bench_mpirun_spin      (array) the same with waiting ranks spinning: for
#                          the benches that time MPI's own latency
#   bench_field TEXT KEY   the word after KEY in TEXT ("raw_ms 1.2 ..." ->
#                          1.2)
#   bench_torch NAME MOD...  for the tpdp.torch benches: prints "NAME:
#                          skipped (...)" and exits 0 unless Debian's
#                          python3 imports every MOD (torch, mpi4py);
#                          else builds libtpdp.so and exports TPDP_LIB and
#                          PYTHONPATH for it
# Environment (optional): BAZEL (the bazel command), BAZEL_STARTUP_FLAGS
# (startup options), BAZEL_OUTPUT_BASE (passed as --output_base),
# BAZEL_FLAGS (build options; default -c opt).
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

bench_bazel_cmd=("${BAZEL:-bazel}")
# shellcheck disable=SC2206 # flags are words
bench_bazel_cmd+=(${BAZEL_STARTUP_FLAGS:-})
[ -n "${BAZEL_OUTPUT_BASE:-}" ] &&
  bench_bazel_cmd+=(--output_base="$BAZEL_OUTPUT_BASE")
# shellcheck disable=SC2206
bench_bazel_flags=(${BAZEL_FLAGS:--c opt})

bench_build() {
  "${bench_bazel_cmd[@]}" build "${bench_bazel_flags[@]}" "$@" >/dev/null 2>&1 ||
    "${bench_bazel_cmd[@]}" build "${bench_bazel_flags[@]}" "$@" >&2 ||
    return 1
  bench_bin=$("${bench_bazel_cmd[@]}" info "${bench_bazel_flags[@]}" bazel-bin 2>/dev/null)
}

bench_tmp=""
bench_tmpdir() {
  bench_tmp=$(mktemp -d)
  trap 'rm -rf "$bench_tmp"' EXIT
}

bench_tokens() {
  local text
  text=$(mktemp)
  cat README.md DEVELOPERS.md >"$text"
  python3 scripts/make-tokens "$text" "$1" >/dev/null
  rm -f "$text"
}

bench_mpirun=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
bench_mpirun_spin=(mpirun --oversubscribe --bind-to none)

bench_field() {
  echo "$1" | awk -v k="$2" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}'
}

bench_torch() {
  local name=$1 mods
  shift
  mods=$(IFS=,; echo "$*")
  if ! /usr/bin/python3 -c "import $mods" >/dev/null 2>&1; then
    echo "$name: skipped (python3 cannot import $mods: scripts/install-deps --bench)"
    exit 0
  fi
  bench_build //:libtpdp.so
  export TPDP_LIB=$bench_bin/libtpdp.so
  export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
}
