#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs a Python test of this folder with Python 3's standard library:
# py_test.sh SCRIPT.py [ARGS...] (the script writes Bazel's XML result).
dir="$(cd "$(dirname "$0")" && pwd)"
script="$1"
shift
exec python3 "$dir/$script" "$@"
