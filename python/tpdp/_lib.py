# SPDX-License-Identifier: BSD-3-Clause
"""libtpdp.so through ctypes: the structs this package mirrors, the function
signatures, the status check, and init/finalize. No torch here.

The library is found through $TPDP_LIB (a path to libtpdp.so), else next to
an install prefix (../../lib of this file when installed by
scripts/install-lib, then the dynamic loader's search path). It is loaded
RTLD_GLOBAL, so that Open MPI's plugins find libmpi's symbols.
"""
import atexit
import ctypes
import os

MAX_DIMS = 8
REDUCER_OPTIONS_VERSION = 2
# The library's tpdp_fully_shard_options version (set by _check_layout): 3
# has the replicate communicator (HSDP), 2 does not.
FULLY_SHARD_OPTIONS_VERSION = 0
VERSION_MAJOR = 0

STATUS_NAMES = [
    "TPDP_SUCCESS", "TPDP_ERR_INVALID_ARGUMENT", "TPDP_ERR_NULL_POINTER",
    "TPDP_ERR_OUT_OF_MEMORY", "TPDP_ERR_SHAPE_MISMATCH",
    "TPDP_ERR_DTYPE_MISMATCH", "TPDP_ERR_DEVICE_MISMATCH", "TPDP_ERR_MPI",
    "TPDP_ERR_NCCL", "TPDP_ERR_CUDA", "TPDP_ERR_TIMEOUT",
    "TPDP_ERR_NOT_INITIALIZED", "TPDP_ERR_UNSUPPORTED", "TPDP_ERR_MESH_SIZE",
    "TPDP_ERR_DUPLICATE", "TPDP_ERR_STATE", "TPDP_ERR_NOT_FOUND",
    "TPDP_ERR_INTERNAL", "TPDP_ERR_EMPTY_NAME", "TPDP_ERR_TOO_MANY_DIMS",
    "TPDP_ERR_BAD_DIM_SIZE", "TPDP_ERR_PARSE", "TPDP_ERR_IO",
    "TPDP_ERR_CYCLE", "TPDP_ERR_MESH_MISMATCH", "TPDP_ERR_OP_DTYPE",
    "TPDP_ERR_ALREADY",
]

# tpdp_dtype values and tpdp_reduce_op values.
F32, F64, F16, BF16, I32, I64, U8 = range(7)
OP_SUM, OP_AVG, OP_MAX, OP_MIN = range(4)
HOOK_NONE, HOOK_BF16, HOOK_F16 = 0, 1, 2


class TpdpError(RuntimeError):
    """A tpdp call failed: `status` is the status name (e.g.
    "TPDP_ERR_STATE"), `message` tpdp_last_error() of the failing call."""

    def __init__(self, status, message, call=""):
        self.status = status
        self.message = message
        self.call = call
        # tpdp's messages name the function already
        super().__init__("%s: %s" % (status, message or "(no message from %s)"
                                     % (call or "tpdp")))


class Device(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("index", ctypes.c_int)]


class Tensor(ctypes.Structure):
    """tpdp_tensor."""
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int),
                ("device", Device), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * MAX_DIMS),
                ("strides", ctypes.c_int64 * MAX_DIMS)]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]


class ReducerParam(ctypes.Structure):
    _fields_ = [("param", Tensor), ("grad", Tensor), ("fqn", ctypes.c_char_p)]


class ReducerOptions(ctypes.Structure):
    """tpdp_reducer_options, version 2."""
    _fields_ = [("size", ctypes.c_size_t), ("version", ctypes.c_uint),
                ("first_bucket_bytes", ctypes.c_size_t),
                ("bucket_cap_bytes", ctypes.c_size_t),
                ("gradient_as_bucket_view", ctypes.c_int),
                ("find_unused_parameters", ctypes.c_int),
                ("static_graph", ctypes.c_int), ("comm_hook", ctypes.c_int),
                ("divide_factor", ctypes.c_double),
                ("hook_fn", ctypes.c_void_p),
                ("hook_user_data", ctypes.c_void_p),
                ("producer_stream", ctypes.c_void_p),
                ("comm_thread", ctypes.c_int), ("module", ctypes.c_void_p),
                ("broadcast_from_rank0", ctypes.c_int)]


class FullyShardOptions(ctypes.Structure):
    """tpdp_fully_shard_options, version 3 (version 2 is the same without
    its last field, `replicate`: the communicator across replicas, HSDP).
    Filled by tpdp_fully_shard_options_default, whose size and version say
    which one the library has (FULLY_SHARD_OPTIONS_VERSION)."""
    _fields_ = [("size", ctypes.c_size_t), ("version", ctypes.c_uint32),
                ("zero_level", ctypes.c_int),
                ("reshard_after_forward", ctypes.c_int),
                ("param_dtype", ctypes.c_int), ("reduce_dtype", ctypes.c_int),
                ("stream", ctypes.c_void_p), ("replicate", ctypes.c_void_p)]


# The size of each version of tpdp_fully_shard_options this package knows.
FULLY_SHARD_OPTIONS_SIZES = {2: FullyShardOptions.replicate.offset,
                             3: ctypes.sizeof(FullyShardOptions)}


class FsdpStats(ctypes.Structure):
    _fields_ = [("persistent_bytes", ctypes.c_int64),
                ("peak_transient_bytes", ctypes.c_int64),
                ("allgathers", ctypes.c_int64),
                ("reduce_scatters", ctypes.c_int64),
                ("bytes_allgathered", ctypes.c_int64),
                ("bytes_reduce_scattered", ctypes.c_int64),
                # since 0.2 (an older library leaves them 0)
                ("allreduces", ctypes.c_int64),
                ("bytes_allreduced", ctypes.c_int64)]


class CheckpointTensorInfo(ctypes.Structure):
    """tpdp_checkpoint_tensor_info."""
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int),
                ("ndim", ctypes.c_int), ("shape", ctypes.c_int64 * MAX_DIMS),
                ("spec_json", ctypes.c_char_p), ("nslices", ctypes.c_int),
                ("nbytes", ctypes.c_uint64)]


class ReducerStats(ctypes.Structure):
    _fields_ = [("total_seconds", ctypes.c_double),
                ("comm_seconds", ctypes.c_double),
                ("data_seconds", ctypes.c_double),
                ("iterations", ctypes.c_int64)]


_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_PT = ctypes.POINTER(Tensor)
_S = ctypes.c_int  # tpdp_status
# name: (restype, argtypes); restype _S means "a status to check".
_SIGNATURES = {
    "tpdp_version": (ctypes.c_int, []),
    "tpdp_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "tpdp_last_error": (ctypes.c_char_p, []),
    "tpdp_clear_error": (None, []),
    "tpdp_init": (_S, [_P, _P]),
    "tpdp_finalize": (_S, []),
    "tpdp_is_initialized": (ctypes.c_int, []),
    "tpdp_comm_world": (_S, [ctypes.POINTER(_P)]),
    "tpdp_comm_rank": (ctypes.c_int, [_P]),
    "tpdp_comm_size": (ctypes.c_int, [_P]),
    "tpdp_comm_name": (ctypes.c_char_p, [_P]),
    "tpdp_comm_destroy": (_S, [_P]),
    "tpdp_comm_create_nccl": (_S, [_P, ctypes.c_int, ctypes.POINTER(_P)]),
    "tpdp_nccl_available": (ctypes.c_int, []),
    "tpdp_comm_nccl_stream": (_P, [_P]),
    "tpdp_chunk_range": (None, [_I64, _I64, _I64, ctypes.POINTER(_I64),
                                ctypes.POINTER(_I64)]),
    "tpdp_tensor_1d": (Tensor, [_P, ctypes.c_int, _I64]),
    "tpdp_tensor_nbytes": (ctypes.c_size_t, [_PT]),
    "tpdp_tensor_from_dlpack": (_S, [ctypes.POINTER(DLTensor), _PT]),
    "tpdp_tensor_to_dlpack": (_S, [_PT, ctypes.POINTER(DLTensor)]),
    "tpdp_allreduce": (_S, [_P, _PT, _PT, ctypes.c_int]),
    "tpdp_allgather": (_S, [_P, _PT, _PT]),
    "tpdp_reduce_scatter": (_S, [_P, _PT, _PT, ctypes.c_int]),
    "tpdp_broadcast": (_S, [_P, _PT, _PT, ctypes.c_int]),
    "tpdp_barrier": (_S, [_P]),
    "tpdp_allreduce_async": (_S, [_P, _PT, _PT, ctypes.c_int,
                                  ctypes.POINTER(_P)]),
    "tpdp_allgather_async": (_S, [_P, _PT, _PT, ctypes.POINTER(_P)]),
    "tpdp_reduce_scatter_async": (_S, [_P, _PT, _PT, ctypes.c_int,
                                       ctypes.POINTER(_P)]),
    "tpdp_broadcast_async": (_S, [_P, _PT, _PT, ctypes.c_int,
                                  ctypes.POINTER(_P)]),
    "tpdp_comm_order_after": (_S, [_P, _P]),
    "tpdp_work_wait_stream": (_S, [_P, _P]),
    "tpdp_mesh_create": (_S, [_P, ctypes.c_int, ctypes.POINTER(_I64),
                              ctypes.POINTER(ctypes.c_char_p),
                              ctypes.POINTER(_P)]),
    "tpdp_mesh_destroy": (_S, [_P]),
    "tpdp_mesh_rank": (ctypes.c_int, [_P]),
    "tpdp_mesh_coords": (_S, [_P, ctypes.c_int, ctypes.POINTER(_I64)]),
    "tpdp_mesh_dim_comm": (_S, [_P, ctypes.c_int, ctypes.POINTER(_P)]),
    "tpdp_reducer_options_default": (ReducerOptions, []),
    "tpdp_reducer_create": (_S, [_P, ctypes.POINTER(ReducerParam), _I64,
                                 ctypes.POINTER(ReducerOptions),
                                 ctypes.POINTER(_P)]),
    "tpdp_reducer_destroy": (_S, [_P]),
    "tpdp_reducer_prepare": (_S, [_P]),
    "tpdp_reducer_mark_ready": (_S, [_P, _I64]),
    "tpdp_reducer_finalize": (_S, [_P]),
    "tpdp_reducer_set_sync": (_S, [_P, ctypes.c_int]),
    "tpdp_reducer_grad_view": (_S, [_P, _I64, _PT]),
    "tpdp_reducer_num_buckets": (_I64, [_P]),
    "tpdp_reducer_bucket": (_S, [_P, _I64, ctypes.POINTER(ctypes.POINTER(_I64)),
                                 ctypes.POINTER(_I64),
                                 ctypes.POINTER(ctypes.c_size_t),
                                 ctypes.POINTER(ctypes.c_size_t)]),
    "tpdp_reducer_unused_params": (_S, [_P, ctypes.POINTER(ctypes.POINTER(_I64)),
                                        ctypes.POINTER(_I64)]),
    "tpdp_reducer_rebuilt": (ctypes.c_int, [_P]),
    "tpdp_reducer_get_stats": (_S, [_P, ctypes.POINTER(ReducerStats)]),
    # the module tree (what fully_shard's units run over)
    "tpdp_module_create": (_S, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    "tpdp_module_destroy": (_S, [_P]),
    "tpdp_module_add_child": (_S, [_P, ctypes.c_char_p, _P]),
    "tpdp_module_add_param": (_S, [_P, ctypes.c_char_p, _P]),
    "tpdp_module_forward_begin": (_S, [_P]),
    "tpdp_module_forward_end": (_S, [_P]),
    "tpdp_module_backward_begin": (_S, [_P]),
    "tpdp_module_backward_end": (_S, [_P]),
    "tpdp_param_create": (_S, [_PT, ctypes.POINTER(_P)]),
    "tpdp_param_release": (None, [_P]),
    "tpdp_param_tensor": (_PT, [_P]),
    "tpdp_param_grad": (_PT, [_P]),
    # fully sharded units
    "tpdp_fully_shard_options_default": (FullyShardOptions, []),
    "tpdp_fully_shard": (_S, [_P, _P, ctypes.POINTER(FullyShardOptions),
                              ctypes.POINTER(_P)]),
    "tpdp_fsdp_unit_state": (ctypes.c_int, [_P]),
    "tpdp_fsdp_num_params": (ctypes.c_int, [_P]),
    "tpdp_fsdp_param": (_P, [_P, ctypes.c_int,
                             ctypes.POINTER(ctypes.c_char_p)]),
    "tpdp_fsdp_param_rows": (_S, [_P, ctypes.c_int, ctypes.POINTER(_I64),
                                  ctypes.POINTER(_I64)]),
    "tpdp_fsdp_finalize": (_S, [_P]),
    "tpdp_fsdp_set_requires_gradient_sync": (_S, [_P, ctypes.c_int]),
    "tpdp_fsdp_get_stats": (_S, [_P, ctypes.POINTER(FsdpStats)]),
    # checkpoints
    "tpdp_state_dict_create": (_S, [ctypes.POINTER(_P)]),
    "tpdp_state_dict_destroy": (_S, [_P]),
    "tpdp_state_dict_add_box": (_S, [_P, ctypes.c_char_p, _PT,
                                     ctypes.POINTER(_I64),
                                     ctypes.POINTER(_I64)]),
    "tpdp_state_dict_set_meta": (_S, [_P, ctypes.c_char_p, ctypes.c_char_p]),
    "tpdp_checkpoint_save": (_S, [_P, ctypes.c_char_p, _P, _P]),
    "tpdp_checkpoint_load": (_S, [_P, ctypes.c_char_p, _P, _P]),
    "tpdp_checkpoint_open": (_S, [ctypes.c_char_p, _P, ctypes.POINTER(_P)]),
    "tpdp_checkpoint_close": (_S, [_P]),
    "tpdp_checkpoint_meta": (ctypes.c_char_p, [_P, ctypes.c_char_p]),
    "tpdp_checkpoint_num_tensors": (ctypes.c_int, [_P]),
    "tpdp_checkpoint_tensor_at": (_S, [_P, ctypes.c_int,
                                       ctypes.POINTER(CheckpointTensorInfo)]),
}


def _candidates():
    env = os.environ.get("TPDP_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    # PREFIX/lib/python3/dist-packages/tpdp or PREFIX/lib/pythonX.Y/...: look
    # in PREFIX/lib.
    d = here
    for _ in range(4):
        d = os.path.dirname(d)
        out.append(os.path.join(d, "lib", "libtpdp.so.%d" % VERSION_MAJOR))
        out.append(os.path.join(d, "libtpdp.so.%d" % VERSION_MAJOR))
    out.append("libtpdp.so.%d" % VERSION_MAJOR)
    out.append("libtpdp.so")
    return out


def _load():
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            errors.append(str(e))
    raise ImportError(
        "tpdp: libtpdp.so not found (set TPDP_LIB=/path/to/libtpdp.so or "
        "install it with scripts/install-lib PREFIX): " + "; ".join(errors))


# Functions newer than the oldest libtpdp this package loads (version
# 0.3+): declared where the library has them; callers check
# `has(name)`.
_OPTIONAL = {
    "tpdp_fsdp_release": (_S, [_P]),
}

lib = _load()
for _name, (_res, _args) in list(_SIGNATURES.items()) + [
        kv for kv in _OPTIONAL.items() if hasattr(lib, kv[0])]:
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


def has(name):
    """Whether the loaded libtpdp has the function `name`."""
    return hasattr(lib, name)


def _check_layout():
    """The structs mirrored above must match the library's."""
    o = lib.tpdp_reducer_options_default()
    if o.size != ctypes.sizeof(ReducerOptions) or \
            o.version != REDUCER_OPTIONS_VERSION:
        raise ImportError(
            "tpdp: tpdp_reducer_options of libtpdp (size %d, version %d) "
            "differs from this package's (size %d, version %d): install "
            "matching versions" % (o.size, o.version,
                                   ctypes.sizeof(ReducerOptions),
                                   REDUCER_OPTIONS_VERSION))
    buf = (ctypes.c_float * 3)()
    t = lib.tpdp_tensor_1d(ctypes.addressof(buf), F32, 3)
    if (t.data != ctypes.addressof(buf) or t.ndim != 1 or t.shape[0] != 3 or
            t.strides[0] != 1 or lib.tpdp_tensor_nbytes(ctypes.byref(t)) != 12):
        raise ImportError("tpdp: tpdp_tensor of libtpdp differs from this "
                          "package's mirror")
    f = lib.tpdp_fully_shard_options_default()
    if FULLY_SHARD_OPTIONS_SIZES.get(f.version) != f.size:
        raise ImportError(
            "tpdp: tpdp_fully_shard_options of libtpdp (size %d, version %d) "
            "is none this package knows (%s): install matching versions"
            % (f.size, f.version, ", ".join(
                "version %d size %d" % kv
                for kv in sorted(FULLY_SHARD_OPTIONS_SIZES.items()))))
    global FULLY_SHARD_OPTIONS_VERSION
    FULLY_SHARD_OPTIONS_VERSION = f.version
    v = lib.tpdp_version()
    if v // 10000 != VERSION_MAJOR:
        raise ImportError("tpdp: libtpdp version %d, this package wants "
                          "major version %d" % (v, VERSION_MAJOR))


_check_layout()


def check(status, call=""):
    """Raise TpdpError for a failed status."""
    if status != 0:
        name = lib.tpdp_status_string(status).decode()
        msg = (lib.tpdp_last_error() or b"").decode(errors="replace")
        raise TpdpError(name, msg, call)


def call(name, *args):
    """lib.name(*args), raising TpdpError on failure."""
    check(getattr(lib, name)(*args), name)


_state = {"inited": False}


def init():
    """tpdp_init once (idempotent). MPI initialised by someone else (mpi4py
    imported first) is left to them."""
    if not _state["inited"]:
        call("tpdp_init", None, None)
        _state["inited"] = True
        atexit.register(_finalize_at_exit)


_finalizers = []


def on_finalize(fn):
    """Run fn() before tpdp_finalize at exit (objects that must go first)."""
    _finalizers.append(fn)


def _finalize_at_exit():
    for fn in reversed(_finalizers):
        try:
            fn()
        except Exception:  # noqa: BLE001 - exit must go on
            pass
    lib.tpdp_finalize()


def world():
    init()
    c = ctypes.c_void_p()
    call("tpdp_comm_world", ctypes.byref(c))
    return c
