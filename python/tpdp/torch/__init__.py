# SPDX-License-Identifier: BSD-3-Clause
"""tpdp.torch: PyTorch's DeviceMesh, DistributedDataParallel and tensor
parallel styles on tpdp (see docs/torch.md).

    from tpdp.torch import init_device_mesh, DistributedDataParallel
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
"""
from .. import _lib
from .._lib import TpdpError
from ._ddp import DistributedDataParallel
from ._mesh import DeviceMesh, init_device_mesh
from ._tp import (ColwiseParallel, ParallelStyle, Replicate, RowwiseParallel,
                  SequenceParallel, Shard, parallelize_module)

__all__ = ["TpdpError", "DeviceMesh", "init_device_mesh",
           "DistributedDataParallel", "parallelize_module", "ParallelStyle",
           "ColwiseParallel", "RowwiseParallel", "SequenceParallel", "Shard",
           "Replicate", "init", "rank", "world_size"]


def init():
    """tpdp_init (done implicitly on first use; finalized at exit)."""
    _lib.init()


def rank():
    return _lib.lib.tpdp_comm_rank(_lib.world())


def world_size():
    return _lib.lib.tpdp_comm_size(_lib.world())
