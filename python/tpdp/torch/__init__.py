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
           "Replicate", "init", "rank", "world_size", "all_reduce"]


def init():
    """tpdp_init (done implicitly on first use; finalized at exit)."""
    _lib.init()


def rank():
    return _lib.lib.tpdp_comm_rank(_lib.world())


def world_size():
    return _lib.lib.tpdp_comm_size(_lib.world())


_OPS = {"sum": _lib.OP_SUM, "avg": _lib.OP_AVG, "max": _lib.OP_MAX,
        "min": _lib.OP_MIN}


def all_reduce(tensor, device_mesh, op="sum"):
    """In place over a 1-D mesh (e.g. mesh["dp"]): op is "sum", "avg",
    "max" or "min". The tensor must be contiguous."""
    from ._mesh import all_reduce_
    if op not in _OPS:
        raise ValueError("tpdp.torch.all_reduce: op %r: use one of %s"
                         % (op, ", ".join(_OPS)))
    if not tensor.is_contiguous():
        raise ValueError("tpdp.torch.all_reduce: the tensor is not "
                         "contiguous")
    return all_reduce_(tensor, device_mesh.comm(), _OPS[op])
