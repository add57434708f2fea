#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs a GoogleTest binary on N MPI ranks: mpirun_test.sh N BINARY [ARGS...]
# Rank 0 alone writes Bazel's XML result file; mpirun fails the test if any
# rank fails. Works as root and with more ranks than cores.
set -u
np="$1"
bin="$2"
shift 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
mpirun -np "$np" --oversubscribe --bind-to none \
  --mca mpi_yield_when_idle 1 \
  --timeout "${TPDP_TEST_TIMEOUT_S:-900}" \
  bash -c 'if [ "${OMPI_COMM_WORLD_RANK:-0}" != 0 ]; then unset XML_OUTPUT_FILE GTEST_OUTPUT; fi; exec "$0" "$@"' \
  "$bin" "$@"
rc=$?
# scripts/summarize-tests looks for this line: rank 0's XML alone cannot
# show another rank's failure.
if [ $rc != 0 ]; then echo "tpdp-test: mpirun exited with code $rc"; fi
exit $rc
