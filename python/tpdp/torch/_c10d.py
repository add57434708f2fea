# SPDX-License-Identifier: BSD-3-Clause
"""tpdp's collectives on torch tensors over a tpdp_comm* (the role of
torch.distributed.distributed_c10d): in place or into a new tensor, no
autograd (see _functional_collectives.py for that). Each tensor goes to C
as a DLPack view held until the call returns."""
import ctypes

import torch

from .. import _lib as L
from ._dlpack import View


def _collective(name, t, comm, *args):
    """tpdp's collective `name` on `comm`. On a GPU, ordered after torch's
    current stream and before its later work (no host synchronisation)."""
    if t.is_cuda:
        stream = torch.cuda.current_stream(t.device).cuda_stream
        L.call("tpdp_comm_order_after", comm, stream)
        work = ctypes.c_void_p()
        L.call(name + "_async", comm, *args, ctypes.byref(work))
        L.call("tpdp_work_wait_stream", work, stream)
    else:
        L.call(name, comm, *args)


def all_reduce_(t, comm, op=L.OP_SUM):
    """In place over `comm` (a contiguous tensor)."""
    v = View(t)
    _collective("tpdp_allreduce", t, comm, v.ref, v.ref, op)
    return t


def all_gather(t, comm, size):
    """The concatenation over ranks along dim 0 of a contiguous tensor."""
    t = t.contiguous()
    out = torch.empty((size * t.shape[0],) + tuple(t.shape[1:]),
                      dtype=t.dtype, device=t.device)
    s, r = View(t), View(out)
    _collective("tpdp_allgather", t, comm, s.ref, r.ref)
    return out


def reduce_scatter(t, comm, size):
    """Sum over ranks, each rank keeping its block of dim 0."""
    t = t.contiguous()
    out = torch.empty((t.shape[0] // size,) + tuple(t.shape[1:]),
                      dtype=t.dtype, device=t.device)
    s, r = View(t), View(out)
    _collective("tpdp_reduce_scatter", t, comm, s.ref, r.ref, L.OP_SUM)
    return out


def broadcast_(t, comm, root=0):
    """In place from `root` (a contiguous tensor)."""
    v = View(t)
    _collective("tpdp_broadcast", t, comm, v.ref, v.ref, root)
    return t


def broadcast_tensors_(tensors, comm, root=0):
    """Every tensor of `tensors` (any dtype, any layout, one device) gets
    root's values: one broadcast of their bytes packed together."""
    tensors = [t for t in tensors if t.numel() > 0]
    if not tensors:
        return
    offs, total = [], 0
    for t in tensors:  # each on an 8-byte boundary, for view(dtype)
        offs.append(total)
        total += -(-t.numel() * t.element_size() // 8) * 8
    flat = torch.empty(total, dtype=torch.uint8, device=tensors[0].device)
    with torch.no_grad():
        for t, o in zip(tensors, offs):
            n = t.numel() * t.element_size()
            flat[o:o + n].view(t.dtype).view(t.shape).copy_(t)
        broadcast_(flat, comm, root)
        for t, o in zip(tensors, offs):
            n = t.numel() * t.element_size()
            t.copy_(flat[o:o + n].view(t.dtype).view(t.shape))
