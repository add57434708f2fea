# SPDX-License-Identifier: BSD-3-Clause
"""The tensor-parallel collectives as autograd Functions (the role of
torch.distributed's _functional_collectives and the parallel styles'
input/output hooks), over a TP group: tpdp's collectives (_c10d.py) on the
communicator of a 1-D mesh. The mesh is read at every call, so that a
parallelized module run after its mesh was closed raises
TpdpError(TPDP_ERR_STATE) naming the mesh and the module, instead of
reaching a freed communicator."""
import torch

from .. import _lib as L
from ._c10d import all_gather, all_reduce_, reduce_scatter
from ._placement_types import chunk_range


class Group:
    """The TP communicator of a 1-D mesh, its size and this rank's index;
    `who` names the user in errors (e.g. "module 'fc1' (ColwiseParallel)")."""

    def __init__(self, mesh, who):
        self.mesh = mesh
        self.who = who
        c = mesh.host_comm()
        self.size = L.lib.tpdp_comm_size(c)
        self.rank = L.lib.tpdp_comm_rank(c)

    @property
    def comm(self):
        return self.mesh.comm("tpdp.torch: the forward of %s" % self.who)

    def check_open(self):
        """TpdpError(TPDP_ERR_STATE) naming the module once the mesh is
        closed (the start of every parallelized forward)."""
        self.mesh._lt_check_open("tpdp.torch: the forward of %s" % self.who)


def gather_dim(x, g, dim, n):
    """The full tensor of n along `dim` from each rank's chunk."""
    c = -(-n // g.size)
    x = x.movedim(dim, 0)
    if x.shape[0] < c:
        x = torch.cat([x, x.new_zeros((c - x.shape[0],) + x.shape[1:])])
    full = all_gather(x, g.comm, g.size)[:n]  # the padding lies past n
    return full.movedim(0, dim)


def scatter_sum_dim(x, g, dim):
    """Sum over ranks of x, this rank keeping its chunk along `dim`."""
    n = x.shape[dim]
    c = -(-n // g.size)
    x = x.movedim(dim, 0)
    if c * g.size > n:
        x = torch.cat([x, x.new_zeros((c * g.size - n,) + x.shape[1:])])
    lo, hi = chunk_range(n, g.size, g.rank)
    return reduce_scatter(x, g.comm, g.size)[:hi - lo].movedim(0, dim)


def full_len(local, g):
    """The full length of a dim this rank holds `local` of (one allreduce
    of a host scalar, over the MPI communicator also on a "cuda" mesh)."""
    t = torch.tensor([local], dtype=torch.int64)
    return int(all_reduce_(t, g.mesh.host_comm(
        "tpdp.torch: the forward of %s" % g.who))[0])


class CopyToTP(torch.autograd.Function):
    """Identity; the backward sums the gradient over the TP ranks."""

    @staticmethod
    def forward(ctx, x, g):
        ctx.g = g
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return all_reduce_(grad.contiguous().clone(), ctx.g.comm), None


class ReduceFromTP(torch.autograd.Function):
    """Sum over the TP ranks; the backward is the identity."""

    @staticmethod
    def forward(ctx, x, g):
        return all_reduce_(x.contiguous().clone(), g.comm)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class GatherDim(torch.autograd.Function):
    """Chunks along dim -> the full tensor; the backward keeps the chunk."""

    @staticmethod
    def forward(ctx, x, g, dim, n):
        ctx.g, ctx.dim, ctx.n = g, dim, n
        return gather_dim(x, g, dim, n)

    @staticmethod
    def backward(ctx, grad):
        lo, hi = chunk_range(ctx.n, ctx.g.size, ctx.g.rank)
        return grad.narrow(ctx.dim, lo, hi - lo), None, None, None


class GatherDimSumBack(torch.autograd.Function):
    """Chunks along dim -> the full tensor used by rank-local math; the
    backward sums the gradients and keeps the chunk (sequence parallel ->
    tensor parallel)."""

    @staticmethod
    def forward(ctx, x, g, dim, n):
        ctx.g, ctx.dim = g, dim
        return gather_dim(x, g, dim, n)

    @staticmethod
    def backward(ctx, grad):
        return scatter_sum_dim(grad, ctx.g, ctx.dim), None, None, None


class ScatterSum(torch.autograd.Function):
    """Partial sums -> this rank's chunk along dim of their sum; the
    backward gathers (tensor parallel -> sequence parallel)."""

    @staticmethod
    def forward(ctx, x, g, dim):
        ctx.g, ctx.dim, ctx.n = g, dim, x.shape[dim]
        return scatter_sum_dim(x, g, dim)

    @staticmethod
    def backward(ctx, grad):
        return gather_dim(grad, ctx.g, ctx.dim, ctx.n), None, None


class SliceDim(torch.autograd.Function):
    """A replicated tensor -> this rank's chunk along dim; the backward
    gathers the chunks' gradients."""

    @staticmethod
    def forward(ctx, x, g, dim):
        ctx.g, ctx.dim, ctx.n = g, dim, x.shape[dim]
        lo, hi = chunk_range(x.shape[dim], g.size, g.rank)
        return x.narrow(dim, lo, hi - lo).clone()

    @staticmethod
    def backward(ctx, grad):
        return gather_dim(grad, ctx.g, ctx.dim, ctx.n), None, None
