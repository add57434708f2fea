# SPDX-License-Identifier: BSD-3-Clause
"""The parallel styles (torch.distributed.tensor.parallel's style.py):
ColwiseParallel, RowwiseParallel, SequenceParallel. A style checks its
arguments when made and its module before anything changes (`_validate`),
then replaces the module's parameters by this rank's shards (plain
nn.Parameter, so that DDP over the "dp" dim sees local tensors) and its
forward by one with the TP collectives (`_apply`)."""
import functools

from torch import nn
from torch.nn import functional as F

from ._functional_collectives import (CopyToTP, GatherDim, GatherDimSumBack,
                                      ReduceFromTP, ScatterSum, SliceDim,
                                      full_len)
from ._placement_types import Placement, Replicate, Shard, chunk_range


def _layout(style, arg, value, default, allowed):
    """A style's input/output layout: a Placement of the kinds `allowed`
    (TypeError for another type, ValueError for another placement)."""
    if value is None:
        return default
    if not isinstance(value, Placement):
        raise TypeError("tpdp.torch.%s: %s is a %s: Shard(dim) or "
                        "Replicate()" % (style, arg, type(value).__name__))
    if not isinstance(value, allowed):
        raise ValueError("tpdp.torch.%s: %s %r: tpdp has %s here"
                         % (style, arg, value, " or ".join(
                             "Shard(dim)" if a is Shard else "Replicate()"
                             for a in allowed)))
    return value


def _norm_dim(dim, ndim, who):
    if not -ndim <= dim < ndim:
        raise ValueError("tpdp.torch: the forward of %s: Shard(%d) on a "
                         "tensor of %d dims" % (who, dim, ndim))
    return dim % ndim


def _shard_param(mod, name, dim, g):
    p = getattr(mod, name)
    lo, hi = chunk_range(p.shape[dim], g.size, g.rank)
    shard = nn.Parameter(p.detach().narrow(dim, lo, hi - lo).clone(),
                         requires_grad=p.requires_grad)
    # where the shard lies in the global tensor (checkpoints read it)
    shard._tpdp_tp = TPShard(dim, p.shape[dim], lo)
    setattr(mod, name, shard)
    return p.shape[dim]


class TPShard:
    """What a TP-sharded parameter is of its global tensor: the rows
    [lo, lo + its size along `dim`) of `size` along `dim` (its attribute
    `_tpdp_tp`; fully_shard carries it over to the shards it makes)."""
    __slots__ = ("dim", "size", "lo")

    def __init__(self, dim, size, lo):
        self.dim, self.size, self.lo = dim, size, lo


class ParallelStyle:
    """Base of the styles: `types` are the module classes it applies to."""
    types = ()

    def _validate(self, fqn, mod, size, rank):
        """Refuse `mod` (at `fqn`) before anything changes: TypeError for
        a module type the style does not apply to, ValueError for shapes
        it cannot shard over `size` ranks (this rank being `rank`)."""
        if not isinstance(mod, self.types):
            raise TypeError(
                "tpdp.torch.parallelize_module: %r is a %s; %s applies to %s"
                % (fqn, type(mod).__name__, type(self).__name__,
                   ", ".join("nn." + t.__name__ for t in self.types)))

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join(
            "%s=%r" % kv for kv in sorted(vars(self).items())))


class ColwiseParallel(ParallelStyle):
    """nn.Linear: out_features sharded (weight rows, bias); nn.Embedding:
    the embedding dim sharded. Input Replicate() (default) or Shard(d)
    (gathered); output Shard(-1) (default, local) or Replicate()."""
    types = (nn.Linear, nn.Embedding)

    def __init__(self, *, input_layouts=None, output_layouts=None,
                 use_local_output=True):
        self.input_layout = _layout("ColwiseParallel", "input_layouts",
                                    input_layouts, Replicate(),
                                    (Replicate, Shard))
        self.output_layout = _layout("ColwiseParallel", "output_layouts",
                                     output_layouts, Shard(-1),
                                     (Replicate, Shard))

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
        g.check_open()
        if isinstance(mod, nn.Linear):
            x = _prepare_replicated_input(x, g, self.input_layout)
            y = F.linear(x, mod.weight, mod.bias)
        else:
            y = F.embedding(x, mod.weight, mod.padding_idx)
        if self.output_layout == Replicate():
            y = GatherDim.apply(y, g, y.dim() - 1, n)
        elif _norm_dim(self.output_layout.dim, y.dim(), g.who) != y.dim() - 1:
            raise ValueError("tpdp.torch: the forward of %s: output_layouts "
                             "%r: a column-wise output is sharded along its "
                             "last dim, Shard(-1)" % (g.who,
                                                      self.output_layout))
        return y


def _prepare_replicated_input(x, g, layout):
    if isinstance(layout, Shard):
        d = _norm_dim(layout.dim, x.dim(), g.who)
        n = full_len(x.shape[d], g)
        return GatherDimSumBack.apply(x, g, d, n)
    return CopyToTP.apply(x, g)


class RowwiseParallel(ParallelStyle):
    """nn.Linear: in_features sharded (weight columns; the bias is added
    once, after the sum); nn.Embedding: vocabulary-parallel (weight rows).
    Input Shard(-1) (default) or Replicate(); output Replicate() (default,
    summed) or Shard(d) (reduce-scattered along d)."""
    types = (nn.Linear, nn.Embedding)

    def __init__(self, *, input_layouts=None, output_layouts=None,
                 use_local_output=True):
        self.input_layout = _layout("RowwiseParallel", "input_layouts",
                                    input_layouts, Shard(-1),
                                    (Replicate, Shard))
        self.output_layout = _layout("RowwiseParallel", "output_layouts",
                                     output_layouts, Replicate(),
                                     (Replicate, Shard))

    def _validate(self, fqn, mod, size, rank):
        super()._validate(fqn, mod, size, rank)
        if isinstance(mod, nn.Embedding):
            v = mod.weight.shape[0]
            lo, hi = chunk_range(v, size, rank)
            if hi == lo:
                raise ValueError(
                    "tpdp.torch.parallelize_module: %r: a vocabulary of %d "
                    "on %d ranks leaves rank %d no rows" % (fqn, v, size,
                                                           rank))

    def _apply(self, mod, g):
        if isinstance(mod, nn.Linear):
            _shard_param(mod, "weight", 1, g)
            mod.in_features = mod.weight.shape[1]
        else:
            mod.vocab_range = chunk_range(mod.weight.shape[0], g.size, g.rank)
            _shard_param(mod, "weight", 0, g)
        mod.forward = functools.partial(self._forward, mod, g)

    def _forward(self, mod, g, x):
        g.check_open()
        bias = None
        if isinstance(mod, nn.Linear):
            if self.input_layout == Replicate():
                x = SliceDim.apply(x, g, x.dim() - 1)
            y = F.linear(x, mod.weight)
            bias = mod.bias
        else:
            lo, hi = mod.vocab_range
            outside = (x < lo) | (x >= hi)
            local = (x - lo).masked_fill(outside, 0)
            y = F.embedding(local, mod.weight)
            y = y.masked_fill(outside.unsqueeze(-1), 0.0)
        if isinstance(self.output_layout, Shard):
            y = ScatterSum.apply(y, g, _norm_dim(self.output_layout.dim,
                                                 y.dim(), g.who))
            if bias is not None:  # partial over the sequence chunks
                bias = CopyToTP.apply(bias, g)
        else:
            y = ReduceFromTP.apply(y, g)
        return y + bias if bias is not None else y


class SequenceParallel(ParallelStyle):
    """nn.LayerNorm on inputs sharded along `sequence_dim` (the local
    chunk in, the local chunk out); its parameters stay replicated and
    their gradients are summed over the TP ranks."""
    types = (nn.LayerNorm,)

    def __init__(self, *, sequence_dim=1, use_local_output=False):
        if not isinstance(sequence_dim, int) or \
                isinstance(sequence_dim, bool):
            raise TypeError("tpdp.torch.SequenceParallel: sequence_dim is a "
                            "%s: an int" % type(sequence_dim).__name__)
        self.sequence_dim = sequence_dim

    def _apply(self, mod, g):
        mod.forward = functools.partial(self._forward, mod, g)

    def _forward(self, mod, g, x):
        g.check_open()
        w = CopyToTP.apply(mod.weight, g) if mod.weight is not None else None
        b = CopyToTP.apply(mod.bias, g) if mod.bias is not None else None
        return F.layer_norm(x, mod.normalized_shape, w, b, mod.eps)
