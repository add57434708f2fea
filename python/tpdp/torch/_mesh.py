# SPDX-License-Identifier: BSD-3-Clause
"""DeviceMesh over tpdp_mesh: init_device_mesh, slices along one dim or
several, the communicators. A mesh and each slice is a Lifetime (_lifetime.py): closing
the mesh closes its slices and whatever runs over them first."""
import ctypes

import torch

from .. import _lib as L
from ._agree import agree
from ._lifetime import Lifetime

_W = "tpdp.torch.init_device_mesh"


class DeviceMesh(Lifetime):
    """PyTorch's DeviceMesh on tpdp: `mesh["tp"]` is the 1-D slice along a
    named dim (this rank's group), `mesh["dp_replicate", "dp_shard"]` the
    2-D slice along two dims (in the mesh's order), `mesh.size()`,
    `mesh.get_local_rank()`. Made by init_device_mesh; `close()` frees it
    (and what runs over it)."""
    _lt_close_when_collected = False

    def __init__(self, device_type, shape, names, handle=None, dims=None,
                 parent=None):
        self.device_type = device_type
        self.mesh_dim_names = tuple(names)
        self._shape = tuple(shape)
        self._handle = handle  # tpdp_mesh* (the root mesh only)
        # a slice: its dims in the root mesh (the root's own: all of them)
        self._dims = tuple(dims) if dims is not None else \
            tuple(range(len(shape)))
        self._parent = parent  # a slice's root mesh
        self._slices = {}
        self._host = None      # the dim's MPI communicator (a 1-D mesh)
        self._nccl = None      # its NCCL communicator ("cuda")
        self._tp_dims = set()  # root dims parallelize_module used
        self._lt_start((parent,) if parent is not None else ())

    def _lt_name(self):
        if self._parent is None:
            return repr(self)
        names = self.mesh_dim_names
        return "%r (slice %r of %r)" % (
            self, names[0] if len(names) == 1 else names, self._parent)

    @property
    def ndim(self):
        return len(self._shape)

    def size(self, mesh_dim=None):
        """The number of ranks (along `mesh_dim`, an index or a name)."""
        self._lt_check_open("tpdp.torch.DeviceMesh.size")
        if mesh_dim is None:
            n = 1
            for s in self._shape:
                n *= s
            return n
        return self._shape[self._dim_index(mesh_dim, "size")]

    def _dim_index(self, mesh_dim, what):
        if isinstance(mesh_dim, str):
            if mesh_dim not in self.mesh_dim_names:
                raise KeyError("tpdp.torch.DeviceMesh.%s: mesh_dim %r: the "
                               "mesh has no such dim (dims: %s)"
                               % (what, mesh_dim,
                                  ", ".join(self.mesh_dim_names)))
            return self.mesh_dim_names.index(mesh_dim)
        if not isinstance(mesh_dim, int) or isinstance(mesh_dim, bool):
            raise TypeError("tpdp.torch.DeviceMesh.%s: mesh_dim is a %s: "
                            "give a dim name or index"
                            % (what, type(mesh_dim).__name__))
        if not -self.ndim <= mesh_dim < self.ndim:
            raise ValueError("tpdp.torch.DeviceMesh.%s: mesh_dim %d is "
                             "outside the %d dims of %r"
                             % (what, mesh_dim, self.ndim, self))
        return mesh_dim % self.ndim

    def __getitem__(self, names):
        self._lt_check_open("tpdp.torch.DeviceMesh[%r]" % (names,))
        key = names if isinstance(names, tuple) else (names,)
        for n in key:
            if not isinstance(n, str):
                raise TypeError("tpdp.torch.DeviceMesh[]: a dim name (str), "
                                "not a %s" % type(n).__name__)
        if not key:
            raise TypeError("tpdp.torch.DeviceMesh[]: a dim name (str) or "
                            "several, not ()")
        for n in key:
            if n not in self.mesh_dim_names:
                raise KeyError("tpdp.torch: the mesh has no dim %r (dims: %s)"
                               % (n, ", ".join(self.mesh_dim_names)))
        idx = [self.mesh_dim_names.index(n) for n in key]
        if len(set(idx)) != len(idx) or idx != sorted(idx):
            raise KeyError("tpdp.torch: DeviceMesh[%s]: name each dim once, "
                           "in the mesh's order (%s)"
                           % (", ".join(repr(n) for n in key),
                              ", ".join(self.mesh_dim_names)))
        if key == self.mesh_dim_names:
            return self
        root = self._root()
        dims = tuple(self._dims[i] for i in idx)
        s = root._slices.get(dims)
        if s is None or s.closed:
            s = DeviceMesh(self.device_type,
                           tuple(root._shape[d] for d in dims),
                           tuple(root.mesh_dim_names[d] for d in dims),
                           dims=dims, parent=root)
            root._slices[dims] = s
        return s

    def _root(self):
        return self._parent if self._parent is not None else self

    def host_comm(self, what="tpdp.torch.DeviceMesh.host_comm"):
        """The tpdp_comm* (MPI) of a 1-D mesh: agreement and host-side
        collectives, also on a "cuda" mesh."""
        self._lt_check_open(what)
        if self.ndim != 1:
            raise ValueError("%s: a %d-D mesh has no single communicator: "
                             "take a 1-D slice, mesh[%r]"
                             % (what, self.ndim, self.mesh_dim_names[0]))
        if self._host is None:
            c = ctypes.c_void_p()
            L.call("tpdp_mesh_dim_comm", self._root()._handle,
                   self._dims[0], ctypes.byref(c))
            self._host = c
        return self._host

    def comm(self, what="tpdp.torch.DeviceMesh.comm"):
        """The tpdp_comm* of a 1-D mesh (NCCL for a "cuda" mesh)."""
        c = self.host_comm(what)
        if self.device_type != "cuda":
            return c
        if self._nccl is None:
            n = ctypes.c_void_p()
            L.call("tpdp_comm_create_nccl", c, torch.cuda.current_device(),
                   ctypes.byref(n))
            self._nccl = n
        return self._nccl

    def get_local_rank(self, mesh_dim=None):
        """This rank's index along `mesh_dim` (a name or index; may be left
        out on a 1-D mesh)."""
        self._lt_check_open("tpdp.torch.DeviceMesh.get_local_rank")
        if mesh_dim is None:
            if self.ndim != 1:
                raise ValueError("tpdp.torch.DeviceMesh.get_local_rank: "
                                 "mesh_dim is needed on a %d-D mesh (one of "
                                 "%s)" % (self.ndim,
                                          ", ".join(self.mesh_dim_names)))
            return L.lib.tpdp_comm_rank(self.host_comm())
        d = self._dim_index(mesh_dim, "get_local_rank")
        return self[self.mesh_dim_names[d]].get_local_rank()

    def get_rank(self):
        """This process's rank in the mesh."""
        self._lt_check_open("tpdp.torch.DeviceMesh.get_rank")
        return L.lib.tpdp_mesh_rank(self._root()._handle)

    def _release(self):
        self._slices = {}
        nccl, self._nccl, self._host = self._nccl, None, None
        h, self._handle = self._handle, None
        if nccl is not None:
            L.call("tpdp_comm_destroy", nccl)
        if h is not None:
            L.call("tpdp_mesh_destroy", h)

    def __repr__(self):
        return "DeviceMesh(%r, %s, mesh_dim_names=%s)" % (
            self.device_type, self._shape, self.mesh_dim_names)


def check_mesh(mesh, what, arg="device_mesh"):
    """A DeviceMesh argument: open and 1-D, else TypeError, ValueError or
    TpdpError(TPDP_ERR_STATE) naming `arg`."""
    if not isinstance(mesh, DeviceMesh):
        raise TypeError("%s: %s is a %s, not a tpdp.torch.DeviceMesh (from "
                        "tpdp.torch.init_device_mesh)"
                        % (what, arg, type(mesh).__name__))
    mesh._lt_check_open("%s (%s)" % (what, arg))
    if mesh.ndim != 1:
        raise ValueError("%s: %s must be 1-D, e.g. mesh[%r]; it is %r"
                         % (what, arg, mesh.mesh_dim_names[-1], mesh))
    return mesh


def _check_args(device_type, mesh_shape, mesh_dim_names):
    if not isinstance(device_type, str):
        raise TypeError("%s: device_type is a %s: 'cpu' or 'cuda'"
                        % (_W, type(device_type).__name__))
    if device_type not in ("cpu", "cuda"):
        raise ValueError("%s: device_type %r: tpdp has 'cpu' and 'cuda'"
                         % (_W, device_type))
    if device_type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("%s: device_type 'cuda': this torch has no "
                             "usable GPU (torch.cuda.is_available() is "
                             "False); use 'cpu'" % _W)
        if not L.lib.tpdp_nccl_available():
            raise ValueError("%s: device_type 'cuda': libtpdp.so was built "
                             "without NCCL (bazel build --config=cuda, or "
                             "scripts/gpu-check)" % _W)
    if mesh_shape is None:
        raise TypeError("%s: mesh_shape is missing: give the ranks per dim, "
                        "e.g. init_device_mesh(%r, (2, 2), mesh_dim_names="
                        "('dp', 'tp'))" % (_W, device_type))
    if isinstance(mesh_shape, int) and not isinstance(mesh_shape, bool):
        mesh_shape = (mesh_shape,)
    if not isinstance(mesh_shape, (tuple, list)) or not all(
            isinstance(s, int) and not isinstance(s, bool)
            for s in mesh_shape):
        raise TypeError("%s: mesh_shape %r: a tuple of ints" % (_W,
                                                                mesh_shape))
    if not 1 <= len(mesh_shape) <= L.MAX_DIMS:
        raise ValueError("%s: mesh_shape %r: 1 to %d dims"
                         % (_W, tuple(mesh_shape), L.MAX_DIMS))
    for i, s in enumerate(mesh_shape):
        if s < 1:
            raise ValueError("%s: mesh_shape %r: dim %d has size %d (at least "
                             "1)" % (_W, tuple(mesh_shape), i, s))
    if mesh_dim_names is None:
        mesh_dim_names = tuple("dim%d" % i for i in range(len(mesh_shape)))
    if not isinstance(mesh_dim_names, (tuple, list)) or not all(
            isinstance(n, str) for n in mesh_dim_names):
        raise TypeError("%s: mesh_dim_names %r: a tuple of str"
                        % (_W, mesh_dim_names))
    if len(mesh_dim_names) != len(mesh_shape):
        raise ValueError("%s: mesh_dim_names: %d names for the %d dims of "
                         "mesh_shape %r" % (_W, len(mesh_dim_names),
                                            len(mesh_shape),
                                            tuple(mesh_shape)))
    for n in mesh_dim_names:
        if not n or "," in n or "=" in n:
            raise ValueError("%s: mesh_dim_names: %r is not a dim name"
                             % (_W, n))
        if list(mesh_dim_names).count(n) > 1:
            raise ValueError("%s: mesh_dim_names: %r appears twice"
                             % (_W, n))
    return tuple(mesh_shape), tuple(mesh_dim_names)


def init_device_mesh(device_type="cpu", mesh_shape=None, *,
                     mesh_dim_names=None):
    """init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")); the
    device type may be left out: init_device_mesh((2, 2), ...) ("cuda" when
    torch has a GPU, else "cpu"). Collective over all ranks: an argument
    refused on one rank is refused on every rank."""
    if mesh_shape is None and isinstance(device_type, (tuple, list, int)) \
            and not isinstance(device_type, bool):
        device_type, mesh_shape = (
            "cuda" if torch.cuda.is_available() else "cpu"), device_type
    error = None
    try:
        shape, names = _check_args(device_type, mesh_shape, mesh_dim_names)
    except (TypeError, ValueError) as e:
        error = e
    world = L.world()
    agree(world, error, same=["device_type %r" % (device_type,)],
          what="%s: device_type" % _W)
    n = len(shape)
    sizes = (ctypes.c_int64 * n)(*shape)
    cnames = (ctypes.c_char_p * n)(*[s.encode() for s in names])
    h = ctypes.c_void_p()
    L.call("tpdp_mesh_create", world, n, sizes, cnames, ctypes.byref(h))
    return DeviceMesh(device_type, shape, names, handle=h)


_world_mesh = {}


def world_mesh(device_type):
    """A 1-D mesh over all ranks (DDP without a device_mesh)."""
    m = _world_mesh.get(device_type)
    if m is None or m.closed:
        size = L.lib.tpdp_comm_size(L.world())
        m = _world_mesh[device_type] = init_device_mesh(
            device_type, (size,), mesh_dim_names=("world",))
    return m
