#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs gpt2_torch_test.py with a Python that has PyTorch (Debian's
# python3-torch lives in /usr/bin/python3, which may not be first on PATH);
# without one the test reports its cases skipped, with the reason.
# Usage: gpt2_torch_test.sh TRAIN_GPT2_BINARY
dir="$(cd "$(dirname "$0")" && pwd)"
for py in "${TPDP_TORCH_PYTHON:-}" /usr/bin/python3 python3; do
  [ -n "$py" ] || continue
  if "$py" -c "import torch" >/dev/null 2>&1; then
    exec "$py" "$dir/gpt2_torch_test.py" "$@"
  fi
done
exec python3 "$dir/gpt2_torch_test.py" "$1" --skip \
  "PyTorch is not installed (python3-torch: bash scripts/install-deps --bench)"
