# SPDX-License-Identifier: BSD-3-Clause
"""torch tensors <-> tpdp_tensor views through DLPack capsules."""
import ctypes

import torch
from torch.utils import dlpack as _tdl

from .. import _lib as L

DTYPES = {torch.float32: L.F32, torch.float64: L.F64, torch.float16: L.F16,
          torch.bfloat16: L.BF16, torch.int32: L.I32, torch.int64: L.I64,
          torch.uint8: L.U8}
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                               ctypes.c_void_p]


def check_dtype(t, what):
    """TypeError naming `what` for a dtype tpdp lacks."""
    if t.dtype not in DTYPES:
        raise TypeError("tpdp.torch: %s has dtype %s, which tpdp lacks "
                        "(supported: %s)" % (what, t.dtype, ", ".join(
                            str(d) for d in DTYPES)))


class View:
    """A tpdp_tensor of a torch tensor's memory. The DLPack capsule (which
    holds a reference to the tensor) lives as long as this object: keep it
    until the C call that reads `.t` has returned."""
    __slots__ = ("t", "capsule")

    def __init__(self, tensor, what="tensor"):
        check_dtype(tensor, what)
        # torch 2.x refuses DLPack of a tensor that requires grad: detach
        # (same memory).
        self.capsule = _tdl.to_dlpack(tensor.detach())
        ptr = _api.PyCapsule_GetPointer(self.capsule, b"dltensor")
        self.t = L.Tensor()
        L.call("tpdp_tensor_from_dlpack",
               ctypes.cast(ptr, ctypes.POINTER(L.DLTensor)),
               ctypes.byref(self.t))

    @property
    def ref(self):
        return ctypes.byref(self.t)


_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_FREE = ctypes.cast(_libc.free, ctypes.c_void_p).value


def to_torch(t):
    """A torch tensor over the memory of tpdp_tensor `t` (zero-copy). The
    DLManagedTensor and its shape and strides are one malloc'd block whose
    deleter is free(): torch frees it, with no Python involved (also at
    interpreter exit)."""
    n = t.ndim
    size = ctypes.sizeof(L.DLManagedTensor) + 16 * max(n, 1)
    addr = _libc.malloc(size)
    if not addr:
        raise MemoryError("tpdp.torch: malloc of a DLPack header failed")
    m = L.DLManagedTensor.from_address(addr)
    dims = (ctypes.c_int64 * (2 * max(n, 1))).from_address(
        addr + ctypes.sizeof(L.DLManagedTensor))
    for i in range(n):
        dims[i] = t.shape[i]
        dims[n + i] = t.strides[i]
    dl = m.dl_tensor
    dl.data = t.data
    dl.device.device_type = 2 if t.device.type == 1 else 1  # kDLCUDA, kDLCPU
    dl.device.device_id = t.device.index if t.device.type == 1 else 0
    dl.ndim = n
    code, bits = _DL_TYPES[t.dtype]
    dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = code, bits, 1
    dl.shape = ctypes.cast(ctypes.addressof(dims), ctypes.POINTER(ctypes.c_int64))
    dl.strides = ctypes.cast(ctypes.addressof(dims) + 8 * n,
                             ctypes.POINTER(ctypes.c_int64))
    dl.byte_offset = 0
    m.manager_ctx = None
    ctypes.cast(addr + L.DLManagedTensor.deleter.offset,
                ctypes.POINTER(ctypes.c_void_p))[0] = _FREE
    capsule = _api.PyCapsule_New(addr, b"dltensor", None)
    return _tdl.from_dlpack(capsule)


# tpdp_dtype -> DLPack (code, bits): kDLInt 0, kDLUInt 1, kDLFloat 2,
# kDLBfloat 4.
_DL_TYPES = {L.F32: (2, 32), L.F64: (2, 64), L.F16: (2, 16), L.BF16: (4, 16),
             L.I32: (0, 32), L.I64: (0, 64), L.U8: (1, 8)}
