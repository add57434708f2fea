# SPDX-License-Identifier: BSD-3-Clause
"""tpdp.torch: PyTorch's DeviceMesh, DistributedDataParallel, fully_shard
(FSDP2) and tensor parallel styles on tpdp, and sharded checkpoints
(tpdp.torch.checkpoint); see docs/torch.md.

    from tpdp.torch import init_device_mesh, DistributedDataParallel
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))

Modules, after torch's: _mesh (DeviceMesh), _ddp (DistributedDataParallel),
_fully_shard and _fsdp_api (fully_shard, MixedPrecisionPolicy),
_placement_types, _functional_collectives, _style and _api (tensor
parallelism), _c10d (the collectives), checkpoint (save, load), _lifetime
and _agree (what every object holding C resources shares: lifetimes,
ownership, agreement across ranks), _dlpack (tensors to and from C).
"""
import torch as _torch

from .. import _lib
from .._lib import TpdpError
from ._api import parallelize_module
from ._c10d import all_reduce_ as _all_reduce_
from ._ddp import DistributedDataParallel
from ._fsdp_api import MixedPrecisionPolicy
from ._fully_shard import FSDPModule, fully_shard
from ._dlpack import check_dtype as _check_dtype
from ._mesh import DeviceMesh, check_mesh as _check_mesh, init_device_mesh
from ._placement_types import Replicate, Shard
from ._style import (ColwiseParallel, ParallelStyle, RowwiseParallel,
                     SequenceParallel)

__all__ = ["TpdpError", "DeviceMesh", "init_device_mesh",
           "DistributedDataParallel", "fully_shard", "FSDPModule",
           "MixedPrecisionPolicy", "parallelize_module", "ParallelStyle",
           "ColwiseParallel", "RowwiseParallel", "SequenceParallel", "Shard",
           "Replicate", "checkpoint", "init", "rank", "world_size",
           "all_reduce"]


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
    w = "tpdp.torch.all_reduce"
    if not isinstance(tensor, _torch.Tensor):
        raise TypeError("%s: tensor is a %s, not a torch.Tensor"
                        % (w, type(tensor).__name__))
    mesh = _check_mesh(device_mesh, w)
    if op not in _OPS:
        raise ValueError("%s: op %r: use one of %s"
                         % (w, op, ", ".join(_OPS)))
    _check_dtype(tensor, "all_reduce's tensor")
    if not tensor.is_contiguous():
        raise ValueError("%s: the tensor is not contiguous" % w)
    if tensor.device.type != mesh.device_type:
        raise ValueError("%s: the tensor is on %s, device_mesh is for %r"
                         % (w, tensor.device, mesh.device_type))
    return _all_reduce_(tensor, mesh.comm(w), _OPS[op])


from . import checkpoint  # noqa: E402,F401 - tpdp.torch.checkpoint.save
