# SPDX-License-Identifier: BSD-3-Clause
"""Tensor parallelism with PyTorch's style names: parallelize_module,
ColwiseParallel, RowwiseParallel, SequenceParallel, Shard, Replicate.

Parameters are replaced by this rank's shard (plain nn.Parameter, so DDP
over the "dp" dim sees local tensors). Shards follow torch.chunk: chunks of
ceil(n / size), the last ones shorter or empty. The forward and backward
collectives are autograd Functions over tpdp's collectives on the TP
communicator.
"""
import functools

import torch
from torch import nn
from torch.nn import functional as F

from .. import _lib as L
from ._mesh import all_gather, all_reduce_, reduce_scatter


class Shard:
    def __init__(self, dim):
        self.dim = dim

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __repr__(self):
        return "Shard(%d)" % self.dim


class Replicate:
    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __repr__(self):
        return "Replicate()"


def chunk_range(n, size, rank):
    """[lo, hi) of rank's chunk of n under torch.chunk's rule."""
    c = -(-n // size)
    lo = min(n, rank * c)
    return lo, min(n, lo + c)


class _Group:
    """The TP communicator with its size and this rank's index."""

    def __init__(self, mesh):
        if mesh.ndim != 1:
            raise ValueError("tpdp.torch.parallelize_module: device_mesh "
                             "must be 1-D, e.g. mesh['tp']")
        self.comm = mesh.comm()
        self.size = L.lib.tpdp_comm_size(self.comm)
        self.rank = L.lib.tpdp_comm_rank(self.comm)


# ------------------------------------------------- autograd collectives

def _gather_dim(x, g, dim, n):
    """The full tensor of n along `dim` from each rank's chunk."""
    c = -(-n // g.size)
    x = x.movedim(dim, 0)
    if x.shape[0] < c:
        x = torch.cat([x, x.new_zeros((c - x.shape[0],) + x.shape[1:])])
    full = all_gather(x, g.comm, g.size)[:n]  # the padding lies past n
    return full.movedim(0, dim)


def _scatter_sum_dim(x, g, dim):
    """Sum over ranks of x, this rank keeping its chunk along `dim`."""
    n = x.shape[dim]
    c = -(-n // g.size)
    x = x.movedim(dim, 0)
    if c * g.size > n:
        x = torch.cat([x, x.new_zeros((c * g.size - n,) + x.shape[1:])])
    lo, hi = chunk_range(n, g.size, g.rank)
    return reduce_scatter(x, g.comm, g.size)[:hi - lo].movedim(0, dim)


class _CopyToTP(torch.autograd.Function):
    """Identity; the backward sums the gradient over the TP ranks."""

    @staticmethod
    def forward(ctx, x, g):
        ctx.g = g
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return all_reduce_(grad.contiguous().clone(), ctx.g.comm), None


class _ReduceFromTP(torch.autograd.Function):
    """Sum over the TP ranks; the backward is the identity."""

    @staticmethod
    def forward(ctx, x, g):
        return all_reduce_(x.contiguous().clone(), g.comm)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherDim(torch.autograd.Function):
    """Chunks along dim -> the full tensor; the backward keeps the chunk."""

    @staticmethod
    def forward(ctx, x, g, dim, n):
        ctx.g, ctx.dim, ctx.n = g, dim, n
        return _gather_dim(x, g, dim, n)

    @staticmethod
    def backward(ctx, grad):
        lo, hi = chunk_range(ctx.n, ctx.g.size, ctx.g.rank)
        return grad.narrow(ctx.dim, lo, hi - lo), None, None, None


class _GatherDimSumBack(torch.autograd.Function):
    """Chunks along dim -> the full tensor used by rank-local math; the
    backward sums the gradients and keeps the chunk (sequence parallel ->
    tensor parallel)."""

    @staticmethod
    def forward(ctx, x, g, dim, n):
        ctx.g, ctx.dim = g, dim
        return _gather_dim(x, g, dim, n)

    @staticmethod
    def backward(ctx, grad):
        return _scatter_sum_dim(grad, ctx.g, ctx.dim), None, None, None


class _ScatterSum(torch.autograd.Function):
    """Partial sums -> this rank's chunk along dim of their sum; the
    backward gathers (tensor parallel -> sequence parallel)."""

    @staticmethod
    def forward(ctx, x, g, dim):
        ctx.g, ctx.dim, ctx.n = g, dim, x.shape[dim]
        return _scatter_sum_dim(x, g, dim)

    @staticmethod
    def backward(ctx, grad):
        return _gather_dim(grad, ctx.g, ctx.dim, ctx.n), None, None


class _SliceDim(torch.autograd.Function):
    """A replicated tensor -> this rank's chunk along dim; the backward
    gathers the chunks' gradients."""

    @staticmethod
    def forward(ctx, x, g, dim):
        ctx.g, ctx.dim, ctx.n = g, dim, x.shape[dim]
        lo, hi = chunk_range(x.shape[dim], g.size, g.rank)
        return x.narrow(dim, lo, hi - lo).clone()

    @staticmethod
    def backward(ctx, grad):
        return _gather_dim(grad, ctx.g, ctx.dim, ctx.n), None, None


def _norm_dim(dim, ndim):
    return dim + ndim if dim < 0 else dim


# ---------------------------------------------------------------- styles

def _shard_param(mod, name, dim, g):
    p = getattr(mod, name)
    lo, hi = chunk_range(p.shape[dim], g.size, g.rank)
    setattr(mod, name, nn.Parameter(p.detach().narrow(dim, lo, hi - lo)
                                    .clone(), requires_grad=p.requires_grad))
    return p.shape[dim]


class ParallelStyle:
    types = ()

    def _check(self, fqn, mod):
        if not isinstance(mod, self.types):
            raise TypeError(
                "tpdp.torch.parallelize_module: %r is a %s; %s applies to %s"
                % (fqn, type(mod).__name__, type(self).__name__,
                   ", ".join("nn." + t.__name__ for t in self.types)))


class ColwiseParallel(ParallelStyle):
    """nn.Linear: out_features sharded (weight rows, bias); nn.Embedding:
    the embedding dim sharded. Input Replicate() (default) or Shard(d)
    (gathered); output Shard(-1) (default, local) or Replicate()."""
    types = (nn.Linear, nn.Embedding)

    def __init__(self, *, input_layouts=None, output_layouts=None,
                 use_local_output=True):
        self.input_layout = input_layouts or Replicate()
        self.output_layout = output_layouts or Shard(-1)

    def _apply(self, mod, g):
        if isinstance(mod, nn.Linear):
            n = _shard_param(mod, "weight", 0, g)
            if mod.bias is not None:
                _shard_param(mod, "bias", 0, g)
            mod.out_features = mod.weight.shape[0]
        else:
            n = _shard_param(mod, "weight", 1, g)
            mod.embedding_dim = mod.weight.shape[1]
        mod.forward = functools.partial(self._forward, mod, g, n)

    def _forward(self, mod, g, n, x):
        if isinstance(mod, nn.Linear):
            x = _prepare_replicated_input(x, g, self.input_layout)
            y = F.linear(x, mod.weight, mod.bias)
        else:
            y = F.embedding(x, mod.weight, mod.padding_idx)
        if self.output_layout == Replicate():
            y = _GatherDim.apply(y, g, y.dim() - 1, n)
        return y


def _prepare_replicated_input(x, g, layout):
    if isinstance(layout, Shard):
        d = _norm_dim(layout.dim, x.dim())
        n = _full_len(x.shape[d], g)
        return _GatherDimSumBack.apply(x, g, d, n)
    return _CopyToTP.apply(x, g)


def _full_len(local, g):
    """The full length of a dim this rank holds `local` of (one allreduce
    of a scalar)."""
    t = torch.tensor([local], dtype=torch.int64)
    return int(all_reduce_(t, g.comm)[0])


class RowwiseParallel(ParallelStyle):
    """nn.Linear: in_features sharded (weight columns; the bias is added
    once, after the sum); nn.Embedding: vocabulary-parallel (weight rows).
    Input Shard(-1) (default) or Replicate(); output Replicate() (default,
    summed) or Shard(d) (reduce-scattered along d)."""
    types = (nn.Linear, nn.Embedding)

    def __init__(self, *, input_layouts=None, output_layouts=None,
                 use_local_output=True):
        self.input_layout = input_layouts or (Shard(-1))
        self.output_layout = output_layouts or Replicate()

    def _apply(self, mod, g):
        if isinstance(mod, nn.Linear):
            _shard_param(mod, "weight", 1, g)
            mod.in_features = mod.weight.shape[1]
        else:
            v = mod.weight.shape[0]
            lo, hi = chunk_range(v, g.size, g.rank)
            if hi == lo:
                raise ValueError(
                    "tpdp.torch.parallelize_module: a vocabulary of %d on %d "
                    "ranks leaves rank %d no rows" % (v, g.size, g.rank))
            _shard_param(mod, "weight", 0, g)
            mod.vocab_range = (lo, hi)
        mod.forward = functools.partial(self._forward, mod, g)

    def _forward(self, mod, g, x):
        bias = None
        if isinstance(mod, nn.Linear):
            if self.input_layout == Replicate():
                x = _SliceDim.apply(x, g, x.dim() - 1)
            y = F.linear(x, mod.weight)
            bias = mod.bias
        else:
            lo, hi = mod.vocab_range
            outside = (x < lo) | (x >= hi)
            local = (x - lo).masked_fill(outside, 0)
            y = F.embedding(local, mod.weight)
            y = y.masked_fill(outside.unsqueeze(-1), 0.0)
        if isinstance(self.output_layout, Shard):
            y = _ScatterSum.apply(y, g, _norm_dim(self.output_layout.dim,
                                                  y.dim()))
            if bias is not None:  # partial over the sequence chunks
                bias = _CopyToTP.apply(bias, g)
        else:
            y = _ReduceFromTP.apply(y, g)
        return y + bias if bias is not None else y


class SequenceParallel(ParallelStyle):
    """nn.LayerNorm on inputs sharded along `sequence_dim` (the local
    chunk in, the local chunk out); its parameters stay replicated and
    their gradients are summed over the TP ranks."""
    types = (nn.LayerNorm,)

    def __init__(self, *, sequence_dim=1, use_local_output=False):
        self.sequence_dim = sequence_dim

    def _apply(self, mod, g):
        mod.forward = functools.partial(self._forward, mod, g)

    def _forward(self, mod, g, x):
        w = _CopyToTP.apply(mod.weight, g) if mod.weight is not None else None
        b = _CopyToTP.apply(mod.bias, g) if mod.bias is not None else None
        return F.layer_norm(x, mod.normalized_shape, w, b, mod.eps)


def parallelize_module(module, device_mesh, parallelize_plan):
    """Apply `parallelize_plan` ({submodule name: style}, or one style for
    `module` itself) over the 1-D `device_mesh`. Every name and module
    type is checked before anything changes. Every TP rank must hold the
    same full parameters (same seed). Returns `module`."""
    if not isinstance(module, nn.Module):
        raise TypeError("tpdp.torch.parallelize_module: module is a %s, not "
                        "a torch.nn.Module" % type(module).__name__)
    if isinstance(parallelize_plan, ParallelStyle):
        parallelize_plan = {"": parallelize_plan}
    todo = []
    for fqn, style in parallelize_plan.items():
        if not isinstance(style, ParallelStyle):
            raise TypeError("tpdp.torch.parallelize_module: the plan's entry "
                            "%r is a %s, not a parallel style"
                            % (fqn, type(style).__name__))
        try:
            mod = module.get_submodule(fqn)
        except AttributeError:
            raise ValueError("tpdp.torch.parallelize_module: the module has "
                             "no submodule %r" % fqn) from None
        style._check(fqn, mod)
        todo.append((style, mod))
    g = _Group(device_mesh)
    for style, mod in todo:
        style._apply(mod, g)
    return module
