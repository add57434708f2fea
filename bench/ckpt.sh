#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Sharded checkpoint save/load against plain I/O on 4 CPU ranks: a 1 GiB
# model (16 f32 tensors of [4096, 4096], Shard(0) over tp=4: 256 MiB per
# rank) saved with tpdp_checkpoint_save and loaded with
# tpdp_checkpoint_load, against each rank writing (then reading) the same
# bytes with write()/read() into one file of its own, in the same run.
# Both sides fsync and write new files each round (the previous round's
# removed after: a crash-safe save keeps the last checkpoint until the new
# one commits); before every timed phase all files are dropped from the
# page cache with posix_fadvise(DONTNEED) (dropping the whole cache needs
# root and /proc/sys/vm/drop_caches, which this does not use). Loads are
# also timed with checksum verification off, and each load's CPU seconds
# (all ranks) are printed: verification hashes (xxhash64) every byte read,
# about as much CPU as the read itself, so on a CPU-starved machine (4
# ranks on 2 shared cores) it shows in the load time. Prints the rounds
# and last `ckpt: save_ratio <x> load_ratio <y>` (plain time / tpdp time,
# medians, verification on; target >= 0.8 each). On a shared, loaded
# machine the rounds vary a lot: look at them, not only the medians.
# Usage: bench/ckpt.sh [--mib N] [--rounds R] [--tensors T]
# The files go to a temporary directory under $TPDP_BENCH_DIR (default
# $TMPDIR or /tmp), removed at the end; it needs about 3x the model size.
# Bazel's settings: see bench/common.sh.
set -euo pipefail
. "$(dirname "$0")/common.sh"
bench_build //bench:ckpt_bench
bin=$bench_bin/bench/ckpt_bench
mib=1024
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[$i]}" = --mib ] && mib=${args[$((i + 1))]}
done
root="${TPDP_BENCH_DIR:-${TMPDIR:-/tmp}}"
free_mib=$(df -Pm "$root" | awk 'NR == 2 { print $4 }')
if [ "$free_mib" -lt $((3 * mib + 512)) ]; then
  echo "bench/ckpt: $root has $free_mib MiB free; needs $((3 * mib + 512))" >&2
  exit 1
fi
dir=$(mktemp -d "$root/tpdp-ckpt-bench.XXXXXX")
trap 'rm -rf "$dir"' EXIT
echo "bench/ckpt: mpirun -np 4 ckpt_bench --dir $dir $*"
"${bench_mpirun[@]}" -np 4 "$bin" --dir "$dir" "$@"
