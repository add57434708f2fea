# SPDX-License-Identifier: BSD-3-Clause
"""fully_shard's policy objects (torch's _composable/fsdp/_fsdp_api.py):
MixedPrecisionPolicy."""
from dataclasses import dataclass
from typing import Optional

import torch

# The dtypes tpdp's units gather, compute and reduce in.
UNIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    """FSDP2's mixed precision. `param_dtype`: the dtype of the gathered
    parameters the forward and backward compute with (the all-gather's
    dtype; the float32 shards stay the master copy the optimizer updates).
    `reduce_dtype`: the reduce-scatter's dtype (None: param_dtype's).
    `output_dtype`: floating outputs of the module cast to it (None: left
    as computed). `cast_forward_inputs`: floating inputs of each unit's
    forward cast to param_dtype. None everywhere: float32 throughout."""
    param_dtype: Optional[torch.dtype] = None
    reduce_dtype: Optional[torch.dtype] = None
    output_dtype: Optional[torch.dtype] = None
    cast_forward_inputs: bool = True
