# SPDX-License-Identifier: BSD-3-Clause
"""DeviceMesh over tpdp_mesh, and the collectives on torch tensors."""
import ctypes
import weakref

import torch

from .. import _lib as L
from ._dlpack import View

_live = []  # weak references to objects to close before tpdp_finalize


def _close_all():
    for ref in reversed(_live):
        obj = ref()
        if obj is not None:
            obj.close()
    _live.clear()


def track(obj):
    """obj.close() runs before tpdp_finalize at exit (if obj still lives)."""
    if not _live:
        L.on_finalize(_close_all)
    _live.append(weakref.ref(obj))


class DeviceMesh:
    """PyTorch's DeviceMesh on tpdp: `mesh["tp"]` is the 1-D slice along a
    named dim (this rank's group), `mesh.size()`, `mesh.get_local_rank()`."""

    def __init__(self, device_type, shape, names, handle=None, dim=None,
                 parent=None):
        self.device_type = device_type
        self.mesh_dim_names = tuple(names)
        self._shape = tuple(shape)
        self._handle = handle  # tpdp_mesh* (the root mesh only)
        self._dim = dim        # for a 1-D slice: its dim in the parent
        self._parent = parent
        self._slices = {}
        self._comm = None      # the communicator of a 1-D slice or 1-D mesh
        self._nccl = None

    @property
    def ndim(self):
        return len(self._shape)

    def size(self, dim=None):
        if dim is None:
            n = 1
            for s in self._shape:
                n *= s
            return n
        return self._shape[dim]

    def __getitem__(self, name):
        if self.ndim == 1 and name == self.mesh_dim_names[0]:
            return self
        if name not in self.mesh_dim_names:
            raise KeyError("tpdp.torch: the mesh has no dim %r (dims: %s)"
                           % (name, ", ".join(self.mesh_dim_names)))
        if name not in self._slices:
            d = self.mesh_dim_names.index(name)
            self._slices[name] = DeviceMesh(self.device_type,
                                            (self._shape[d],), (name,),
                                            dim=d, parent=self)
        return self._slices[name]

    def _root(self):
        return self._parent if self._parent is not None else self

    def comm(self):
        """The tpdp_comm* of a 1-D mesh (NCCL for a "cuda" mesh)."""
        if self.ndim != 1:
            raise ValueError("tpdp.torch: a %d-D mesh has no single "
                             "communicator: take a 1-D slice, mesh[%r]"
                             % (self.ndim, self.mesh_dim_names[0]))
        if self._comm is None:
            root = self._root()
            c = ctypes.c_void_p()
            L.call("tpdp_mesh_dim_comm", root._handle,
                   self._dim if self._dim is not None else 0, ctypes.byref(c))
            self._comm = c
            if self.device_type == "cuda":
                n = ctypes.c_void_p()
                L.call("tpdp_comm_create_nccl", c,
                       torch.cuda.current_device(), ctypes.byref(n))
                self._nccl = n
                self._comm = n
                track(self)
        return self._comm

    def get_local_rank(self, mesh_dim=None):
        if mesh_dim is None:
            if self.ndim != 1:
                raise ValueError("tpdp.torch: name the mesh dim")
            return L.lib.tpdp_comm_rank(self.comm())
        if isinstance(mesh_dim, str):
            return self[mesh_dim].get_local_rank()
        return self[self.mesh_dim_names[mesh_dim]].get_local_rank()

    def get_rank(self):
        return L.lib.tpdp_mesh_rank(self._root()._handle)

    def close(self):
        if self._nccl is not None:
            L.lib.tpdp_comm_destroy(self._nccl)
            self._nccl = None
            self._comm = None
        if self._handle is not None:
            for s in self._slices.values():
                s.close()
            L.lib.tpdp_mesh_destroy(self._handle)
            self._handle = None

    def __repr__(self):
        return "DeviceMesh(%r, %s, mesh_dim_names=%s)" % (
            self.device_type, self._shape, self.mesh_dim_names)


def init_device_mesh(device_type="cpu", mesh_shape=None, *,
                     mesh_dim_names=None):
    """init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")); the
    device type may be left out: init_device_mesh((2, 2), ...) ("cuda" when
    torch has a GPU, else "cpu"). Collective over all ranks."""
    if not isinstance(device_type, str):
        device_type, mesh_shape = (
            "cuda" if torch.cuda.is_available() else "cpu"), device_type
    if device_type not in ("cpu", "cuda"):
        raise ValueError("tpdp.torch: device type %r: tpdp has 'cpu' and "
                         "'cuda'" % device_type)
    if isinstance(mesh_shape, int):
        mesh_shape = (mesh_shape,)
    mesh_shape = tuple(int(s) for s in mesh_shape)
    if mesh_dim_names is None:
        mesh_dim_names = tuple("dim%d" % i for i in range(len(mesh_shape)))
    if len(mesh_dim_names) != len(mesh_shape):
        raise ValueError("tpdp.torch: %d mesh dims but %d names"
                         % (len(mesh_shape), len(mesh_dim_names)))
    n = len(mesh_shape)
    sizes = (ctypes.c_int64 * n)(*mesh_shape)
    names = (ctypes.c_char_p * n)(*[s.encode() for s in mesh_dim_names])
    h = ctypes.c_void_p()
    L.call("tpdp_mesh_create", L.world(), n, sizes, names, ctypes.byref(h))
    mesh = DeviceMesh(device_type, mesh_shape, mesh_dim_names, handle=h)
    track(mesh)
    return mesh


_world_mesh = {}


def world_mesh(device_type):
    """A 1-D mesh over all ranks (DDP without a device_mesh)."""
    if device_type not in _world_mesh:
        size = L.lib.tpdp_comm_size(L.world())
        _world_mesh[device_type] = init_device_mesh(
            device_type, (size,), mesh_dim_names=("world",))
    return _world_mesh[device_type]


# ------------------------------------------------------------ collectives

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
    v = View(t)
    _collective("tpdp_broadcast", t, comm, v.ref, v.ref, root)
    return t
