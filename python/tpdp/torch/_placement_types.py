# SPDX-License-Identifier: BSD-3-Clause
"""Placements (torch.distributed.tensor's placement_types): Shard(dim) and
Replicate(), and the chunk rule every shard follows, the library's own
(tpdp_chunk_range), so that C and Python cannot disagree."""
import ctypes

from .. import _lib as L


class Placement:
    """Base of Shard and Replicate."""


class Shard(Placement):
    """Sharded along tensor dim `dim` (negative counts from the end)."""

    def __init__(self, dim):
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise TypeError("tpdp.torch.Shard: dim is a %s: an int"
                            % type(dim).__name__)
        self.dim = dim

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self):
        return hash(("Shard", self.dim))

    def __repr__(self):
        return "Shard(%d)" % self.dim


class Replicate(Placement):
    """The whole tensor on every rank."""

    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __hash__(self):
        return hash("Replicate")

    def __repr__(self):
        return "Replicate()"


def chunk_range(n, size, rank):
    """[lo, hi) of `rank`'s chunk of n items over `size` ranks: torch.chunk's
    rule (chunks of ceil(n / size), the last ones shorter or empty), as
    tpdp_chunk_range computes it."""
    start, length = ctypes.c_int64(), ctypes.c_int64()
    L.lib.tpdp_chunk_range(n, size, rank, ctypes.byref(start),
                           ctypes.byref(length))
    return start.value, start.value + length.value
