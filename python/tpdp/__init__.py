# SPDX-License-Identifier: BSD-3-Clause
"""tpdp from Python: `tpdp.torch` trains PyTorch models with tpdp's tensor
parallelism and gradient buckets (see docs/torch.md)."""
