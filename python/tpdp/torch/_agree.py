# SPDX-License-Identifier: BSD-3-Clause
"""Agreement across ranks: a mistake found on some ranks only is raised on
every rank, alike, before the next collective (as tpdp_comm_agree does for
the C library). Host communicators only (a "cuda" mesh agrees over its
MPI communicator: nothing waits for the GPU)."""
import ctypes
import struct

import torch

from .. import _lib as L
from ._c10d import all_gather

# Exception classes carried across ranks, by code (TpdpError: 100 + status).
_CLASSES = {1: ValueError, 2: TypeError, 3: KeyError, 4: RuntimeError}


def _code(exc):
    if isinstance(exc, L.TpdpError):
        names = L.STATUS_NAMES
        return 100 + (names.index(exc.status) if exc.status in names else 17)
    for code, cls in _CLASSES.items():
        if type(exc) is cls:
            return code
    return 4


def _message(exc):
    if isinstance(exc, L.TpdpError):
        return exc.message
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc)


def make_error(code, message):
    if code >= 100:
        status = L.STATUS_NAMES[code - 100]
        return L.TpdpError(status, message)
    return _CLASSES.get(code, RuntimeError)(message)


def comm_size(comm):
    return L.lib.tpdp_comm_size(comm)


def allgather_i64(comm, values):
    """Each rank's list of len(values) integers, in rank order."""
    n = len(values)
    t = torch.tensor(values, dtype=torch.int64)
    out = all_gather(t, comm, comm_size(comm)).tolist()
    return [out[r * n:(r + 1) * n] for r in range(comm_size(comm))]


class Records:
    """Each rank's record of `width` integers, exchanged in one allgather
    over buffers made once (the per-step agreement of a wrapper: no
    tensor, no allocation per exchange)."""

    def __init__(self, comm, width):
        self.comm, self.width = comm, width
        self.size = comm_size(comm)
        self._send = (ctypes.c_int64 * width)()
        self._recv = (ctypes.c_int64 * (width * self.size))()
        self._s = L.lib.tpdp_tensor_1d(ctypes.addressof(self._send), L.I64,
                                       width)
        self._r = L.lib.tpdp_tensor_1d(ctypes.addressof(self._recv), L.I64,
                                       width * self.size)

    def exchange(self, values):
        """Every rank's `values`, in rank order."""
        if self.size == 1:
            return [list(values)]
        self._send[:] = values
        L.call("tpdp_allgather", self.comm, ctypes.byref(self._s),
               ctypes.byref(self._r))
        out, w = self._recv[:], self.width
        return [out[r * w:(r + 1) * w] for r in range(self.size)]


def allgather_bytes(comm, data):
    """Each rank's bytes, in rank order (two allgathers)."""
    lens = [x[0] for x in allgather_i64(comm, [len(data)])]
    width = max(max(lens), 1)
    buf = torch.zeros(width, dtype=torch.uint8)
    if data:
        buf[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    got = all_gather(buf, comm, len(lens)).contiguous()
    # not .numpy(): torch 2.x wheels do not bring numpy along
    out = ctypes.string_at(got.data_ptr(), got.numel())
    return [out[r * width:r * width + lens[r]] for r in range(len(lens))]


def agree(comm, error=None, same=None, what="the value", group=0):
    """Collective over `comm`. `error`: the exception this rank found (or
    None). `same`: a list of strings every rank must hold alike (or None);
    with `group` (an integer), only the ranks of the same group compare
    their lists (e.g. the shapes of one dp group, where the tp ranks of
    another hold other shapes). Raises, on every rank alike: the error of
    the lowest rank that found one (its class and message, "(rank R of N)"
    added); else, when the lists of two ranks of one group differ,
    ValueError naming `what`, the first differing entry and the ranks."""
    desc = "\n".join(same) if same is not None else ""
    msg = _message(error).encode() if error is not None else b""
    head = struct.pack("<qqq", _code(error) if error is not None else 0,
                       len(msg), group)
    recs = allgather_bytes(comm, head + msg + desc.encode())
    size = len(recs)
    for r, rec in enumerate(recs):
        code, mlen, _ = struct.unpack("<qqq", rec[:24])
        if code:
            text = rec[24:24 + mlen].decode(errors="replace")
            exc = make_error(code, "%s (rank %d of %d)" % (text, r, size))
            raise exc from error
    if same is None:
        return
    groups = [struct.unpack("<qqq", rec[:24])[2] for rec in recs]
    lists = [rec[24:].decode(errors="replace").split("\n") for rec in recs]
    for r in range(1, size):
        first = groups.index(groups[r])  # the group's lowest rank
        if lists[r] == lists[first]:
            continue
        k = 0
        while k < min(len(lists[first]), len(lists[r])) and \
                lists[first][k] == lists[r][k]:
            k += 1
        mine = lists[first][k] if k < len(lists[first]) else "(nothing)"
        theirs = lists[r][k] if k < len(lists[r]) else "(nothing)"
        raise ValueError("%s differs across ranks: rank %d has %s, rank %d "
                         "has %s (every rank must pass the same)"
                         % (what, first, mine, r, theirs))
