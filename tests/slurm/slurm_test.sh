#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs slurm_test.py (Python 3's standard library; it writes Bazel's XML
# result): slurm_test.sh ARGS...
exec python3 "$(cd "$(dirname "$0")" && pwd)/slurm_test.py" "$@"
