# SPDX-License-Identifier: BSD-3-Clause
"""The probes of one layer's package under tests/layering/ (check.sh)."""

def layering_probes(allowed = [], refused = {}):
    """`ok`: a library depending on every layer in `allowed` (what the layer
    this package stands for may use; omitted when empty). One target per
    entry of `refused` (probe name -> the dependency the layering forbids),
    tagged manual so that //... never builds them: check.sh does, and
    passes only if Bazel refuses each."""
    if allowed:
        native.cc_library(
            name = "ok",
            deps = allowed,
        )
    for name, dep in refused.items():
        native.cc_library(
            name = name,
            tags = ["manual"],
            deps = [dep],
        )
