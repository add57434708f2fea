# SPDX-License-Identifier: BSD-3-Clause
"""DistributedDataParallel over tpdp's reducer.

Memory: the reducer runs in gradient-as-bucket-view mode whatever the
option says, and is given no gradient buffer of ours, so C only ever
touches its own bucket memory (and the parameters, during create). With
gradient_as_bucket_view=True each p.grad is a tensor over its bucket slot,
handed out through a CViews (moved at the bucket rebuild, given memory of
its own at close); with False, p.grad is an ordinary tensor, copied into
the slot by its hook and back after the reduction, as torch's DDP does.
A p.grad replaced by the user (`p.grad = t`, `p.grad.data = t`, another
dtype or device) is adopted: copied into the slot, p.grad bound to the
slot again; one of another shape is refused.

Steps: a forward under grad arms the next backward: its first gradient
hook starts the reducer's iteration (prepare) and queues the finalize at
the end of backward; hooks of a backward that no forward armed (a second
backward of the same graph, a forward run on the inner module) keep their
gradients local, as torch's DDP does. Each synchronised forward and
backward (and each forward that broadcasts buffers) begins with one small
allgather of every rank's step record (`_agree_step`): ranks out of step
(a backward missing or extra on some rank) or a mistake found on one rank
(a parameter replaced, a gradient of the wrong shape) raise on every rank
alike, before any bucket is reduced, instead of pairing one rank's buckets
with another step's or waiting for the watchdog.
"""
import contextlib
import ctypes
import functools
import itertools
import weakref

import torch
from torch import nn

from .. import _lib as L
from ._agree import Records, agree
from ._c10d import broadcast_tensors_
from ._dlpack import FLOAT_DTYPES, View, to_torch
from ._lifetime import (WRAPPED, CViews, Lifetime,
                        check_parameters_keep_identity, state_error)
from ._mesh import check_mesh, world_mesh

_W = "tpdp.torch.DistributedDataParallel"
_HOOKS = {None: L.HOOK_NONE, "bf16": L.HOOK_BF16, "fp16": L.HOOK_F16}
# torch's DDP: the first bucket 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES).
FIRST_BUCKET_BYTES = 1024 * 1024
# The phases of a step record (_agree_step).
_FORWARD, _FORWARD_LOCAL, _BACKWARD = 0, 1, 2
# Mistakes found on one rank, carried in the step record.
_REPLACED, _BUFFER_REPLACED, _GRAD_SHAPE = 1, 2, 3
_serial = itertools.count(1)


def _slot_tensor(r, i):
    """A new torch tensor over the reducer's current slot of gradient i."""
    t = L.Tensor()
    L.call("tpdp_reducer_grad_view", r, i, ctypes.byref(t))
    return to_torch(t)


def _flag(x, what):
    if not isinstance(x, (bool, int)):
        raise TypeError("%s: %s is a %s: True or False" % (
            _W, what, type(x).__name__))
    return bool(x)


class DistributedDataParallel(nn.Module, Lifetime):
    """torch.nn.parallel.DistributedDataParallel's names and meanings,
    reduced over `device_mesh` (1-D; all ranks when None)."""

    def __init__(self, module, device_mesh=None, bucket_cap_mb=25,
                 find_unused_parameters=False, gradient_as_bucket_view=True,
                 broadcast_buffers=True, comm_hook=None):
        super().__init__()
        if device_mesh is not None:
            check_mesh(device_mesh, _W)
        # Everything else is checked on every rank, then agreed: a mistake
        # on one rank raises on all of them before any other collective.
        error, named, device = None, [], None
        try:
            named, device = self._check_args(
                module, device_mesh, bucket_cap_mb, find_unused_parameters,
                gradient_as_bucket_view, broadcast_buffers, comm_hook)
        except (TypeError, ValueError) as e:
            error = e
        comm = device_mesh.host_comm() if device_mesh is not None \
            else L.world()
        same = None
        if error is None:
            same = ["option %s=%r" % kv for kv in (
                ("bucket_cap_mb", float(bucket_cap_mb)),
                ("find_unused_parameters", bool(find_unused_parameters)),
                ("gradient_as_bucket_view", bool(gradient_as_bucket_view)),
                ("broadcast_buffers", bool(broadcast_buffers)),
                ("comm_hook", comm_hook))]
            same += ["parameter %r %s %s%s" % (
                n, p.dtype, tuple(p.shape),
                "" if p.requires_grad else " (no grad)")
                for n, p in module.named_parameters()]
            same += ["buffer %r %s %s" % (n, b.dtype, tuple(b.shape))
                     for n, b in module.named_buffers()]
        agree(comm, error, same, what="%s: the module or an option" % _W)

        if device_mesh is None:
            device_mesh = world_mesh(device.type)
        self.module = module
        self.device_mesh = device_mesh
        self.broadcast_buffers = bool(broadcast_buffers)
        self.gradient_as_bucket_view = bool(gradient_as_bucket_view)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.require_backward_grad_sync = True
        self._serial = next(_serial)
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        # (owning module, attribute, object): replacements are seen
        self._param_slots = [self._slot_of(module, n, p) for n, p in named]
        self._checks = [(d, a, p, p.shape) for d, a, p in self._param_slots]
        self._buffers = [b for _, b in module.named_buffers()]
        self._buffer_names = [n for n, _ in module.named_buffers()]
        self._buffer_slots = [self._slot_of(module, n, b) for n, b in
                              module.named_buffers()]
        self._host = device_mesh.host_comm()
        self._records = Records(self._host, 6)
        self._comm = device_mesh.comm()
        self._size = L.lib.tpdp_comm_size(self._comm)
        self._r = None

        # Rank 0's state everywhere: the reducer broadcasts the parameters
        # it reduces; the rest (parameters without grad, buffers: any
        # dtype, any layout) goes here, before anything reads them.
        frozen = [p for p in module.parameters() if not p.requires_grad]
        self._broadcast(frozen + self._buffers)

        n = len(self._params)
        arr = (L.ReducerParam * n)()
        self._fqns = [s.encode() for s in self._names]
        views = []
        for i, p in enumerate(self._params):
            pv = View(p, "parameter %r" % self._names[i])
            arr[i].param = pv.t
            arr[i].grad = pv.t
            arr[i].grad.data = None  # no buffer of ours: see the top
            arr[i].fqn = self._fqns[i]
            views.append(pv)
        self._arr = arr  # the reducer writes it until destroy
        opts = L.lib.tpdp_reducer_options_default()
        opts.first_bucket_bytes = FIRST_BUCKET_BYTES
        opts.bucket_cap_bytes = int(bucket_cap_mb * 1024 * 1024)
        opts.gradient_as_bucket_view = 1
        opts.find_unused_parameters = int(self.find_unused_parameters)
        opts.comm_hook = _HOOKS[comm_hook]
        opts.broadcast_from_rank0 = 1  # DDP copies rank 0's parameters
        if device.type == "cuda":
            opts.producer_stream = torch.cuda.current_stream().cuda_stream
        r = ctypes.c_void_p()
        L.call("tpdp_reducer_create", self._comm, arr, n, ctypes.byref(opts),
               ctypes.byref(r))
        del views
        self._r = r
        self._hook_handles = []
        self._acc = []
        self._lt_start((device_mesh,))
        for p in module.parameters():
            WRAPPED.claim(p, self)

        # Each gradient's slot (ours only: never handed out) and the tensors
        # over it that are handed out as p.grad (view mode).
        self._slot = [_slot_tensor(r, i) for i in range(n)]
        self._cv = CViews(functools.partial(_slot_tensor, r), n)
        self._own = []  # copy mode: p.grad when the user left it None
        with torch.no_grad():
            for i, p in enumerate(self._params):
                g = p.grad
                if g is not None and g.shape == p.shape:
                    self._slot[i].copy_(g)  # the values the user had
                if self.gradient_as_bucket_view:
                    p.grad = self._cv.get(i)
                else:
                    if g is None or g.shape != p.shape:
                        g = torch.zeros_like(p)
                    p.grad = g
                    self._own.append(g)

        self._rebuilt = False
        self._armed = False       # a forward under grad ran since the last
        self._armed_sync = True   # backward; with sync, or under no_sync
        self._in_iter = False
        self._sync_now = True     # the reducer's sync setting
        self._seq = 0             # step records exchanged
        self._forwards = 0        # synchronised forwards under grad
        self._backwards = 0       # synchronised backwards reduced
        self._late = None         # a gradient refused inside a backward
        post = getattr(torch.Tensor, "register_post_accumulate_grad_hook",
                       None)
        for i, p in enumerate(self._params):
            hook = self._grad_hook(i)
            if post is not None:
                self._hook_handles.append(
                    p.register_post_accumulate_grad_hook(hook))
            else:
                # torch < 2.1: the AccumulateGrad node's post hook, as DDP.
                with torch.enable_grad():  # also when built under no_grad
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._acc.append(acc)  # the hook lives with the node
                self._hook_handles.append(acc.register_hook(hook))

    # ------------------------------------------------------------ setup

    @staticmethod
    def _slot_of(module, fqn, obj):
        """(the dict that holds `obj` in its module, its key, obj): one
        look-up tells whether it was replaced."""
        owner, _, attr = fqn.rpartition(".")
        m = module.get_submodule(owner)
        return (m._parameters if isinstance(obj, nn.Parameter)
                else m._buffers, attr, obj)

    @staticmethod
    def _check_args(module, device_mesh, bucket_cap_mb, find_unused,
                    as_view, broadcast_buffers, comm_hook):
        if not isinstance(module, nn.Module):
            raise TypeError("%s: module is a %s, not a torch.nn.Module"
                            % (_W, type(module).__name__))
        if isinstance(module, DistributedDataParallel):
            raise ValueError("%s: module is already a %s: wrap the inner "
                             "module once" % (_W, module._lt_name()))
        check_parameters_keep_identity(_W)
        if comm_hook not in _HOOKS:
            raise ValueError("%s: comm_hook %r: use None, 'bf16' or 'fp16'"
                             % (_W, comm_hook))
        if not isinstance(bucket_cap_mb, (int, float)) or \
                isinstance(bucket_cap_mb, bool):
            raise TypeError("%s: bucket_cap_mb is a %s: a number of MiB"
                            % (_W, type(bucket_cap_mb).__name__))
        if not bucket_cap_mb > 0 or bucket_cap_mb != bucket_cap_mb:
            raise ValueError("%s: bucket_cap_mb %r must be > 0"
                             % (_W, bucket_cap_mb))
        _flag(find_unused, "find_unused_parameters")
        _flag(as_view, "gradient_as_bucket_view")
        _flag(broadcast_buffers, "broadcast_buffers")
        named = [(n, p) for n, p in module.named_parameters()
                 if p.requires_grad]
        if not named:
            raise ValueError("%s: the module has no parameter that requires "
                             "grad" % _W)
        device = named[0][1].device
        if device.type not in ("cpu", "cuda"):
            raise ValueError("%s: parameter %r is on %s: tpdp reduces 'cpu' "
                             "and 'cuda' tensors" % (_W, named[0][0], device))
        for n, p in named:
            if p.dtype not in FLOAT_DTYPES:
                raise TypeError("%s: parameter %r has dtype %s; tpdp reduces "
                                "float32, float64, float16, bfloat16"
                                % (_W, n, p.dtype))
            if p.device != device:
                raise ValueError("%s: parameter %r is on %s, %r on %s: one "
                                 "device" % (_W, n, p.device, named[0][0],
                                             device))
            if not p.is_contiguous():
                raise ValueError("%s: parameter %r is not contiguous"
                                 % (_W, n))
        if device_mesh is not None and device_mesh.device_type != device.type:
            raise ValueError("%s: device_mesh is for %r, the parameters on "
                             "%s" % (_W, device_mesh.device_type, device))
        for n, p in module.named_parameters():
            h = WRAPPED.holder(p)
            if h is not None:
                raise ValueError(
                    "%s: module: its parameter %r is held by %s: close() "
                    "that wrapper (or drop every reference to it) before "
                    "wrapping the module again" % (_W, n, h._lt_name()))
        return named, device

    def _lt_name(self):
        return "DistributedDataParallel #%d (of a %s, over %r)" % (
            self._serial, type(self.module).__name__, self.device_mesh)

    def _broadcast(self, tensors):
        """Rank 0's values of `tensors` on every rank of the mesh (CPU
        tensors over the host communicator, GPU ones over the mesh's)."""
        if self._size == 1:
            return
        cpu = [t for t in tensors if not t.is_cuda]
        gpu = [t for t in tensors if t.is_cuda]
        broadcast_tensors_(cpu, self._host)
        if gpu:
            broadcast_tensors_(gpu, self._comm)

    # ------------------------------------------------------------ steps

    def _check_state(self):
        """(mistake, index) of the first parameter replaced in its module,
        buffer replaced, or gradient of another shape (0, -1 if none).
        Gradients replaced by tensors of the right shape are adopted."""
        view = self.gradient_as_bucket_view
        given, ptrs = self._cv.tensors, self._cv.ptrs
        for i, (d, attr, p, shape) in enumerate(self._checks):
            if d.get(attr) is not p:
                return _REPLACED, i
            g = p.grad
            if g is None:
                continue
            if g.shape != shape:
                return _GRAD_SHAPE, i
            if view and (g is not given[i] or g.data_ptr() != ptrs[i]):
                self._adopt(i, p, g)
        for j, (d, attr, b) in enumerate(self._buffer_slots):
            if d.get(attr) is not b:
                return _BUFFER_REPLACED, j
        return 0, -1

    def _adopt(self, i, p, g):
        """A gradient of the user's (p.grad assigned, its .data swapped,
        another dtype or device): its values into the slot, p.grad the
        slot's tensor again."""
        with torch.no_grad():
            self._slot[i].copy_(g)
        p.grad = self._cv.get(i)

    def _mistake(self, code, index, rank):
        if code == _REPLACED:
            return ValueError(
                "%s: parameter %r was replaced after wrapping (rank %d): "
                "close() this wrapper and wrap the module again"
                % (_W, self._names[index], rank))
        if code == _BUFFER_REPLACED:
            return ValueError(
                "%s: buffer %r was replaced after wrapping (rank %d): close() "
                "this wrapper and wrap the module again (or update the "
                "buffer in place)" % (_W, self._buffer_names[index], rank))
        p = self._params[index]
        return ValueError(
            "%s: the gradient of parameter %r has another shape than the "
            "parameter %s (rank %d): a gradient of the parameter's shape "
            "(any dtype or device) is taken over, this one is refused; set "
            "p.grad = None" % (_W, self._names[index], tuple(p.shape), rank))

    def _agree_step(self, phase, code=0, index=-1):
        """Every rank's step record, compared: ranks in another phase or
        step, or a mistake found on one of them, raise on every rank."""
        rec = [self._seq, phase, self._forwards, self._backwards, code, index]
        recs = self._records.exchange(rec)
        self._seq += 1
        if any(x[:2] != rec[:2] for x in recs):
            # In step again from here on: the next forward is every rank's.
            self._seq = max(x[0] for x in recs) + 1
            self._forwards = max(x[2] for x in recs)
            self._backwards = self._forwards
            self._armed = False
            raise state_error(_W, self._out_of_step(recs))
        for r, x in enumerate(recs):
            if x[4]:
                raise self._mistake(x[4], x[5], r)

    def _out_of_step(self, recs):
        def where(x):
            if x[1] == _FORWARD:
                return "in its forward %d" % (x[2] + 1)
            if x[1] == _FORWARD_LOCAL:
                return ("in a forward that broadcasts the buffers but "
                        "reduces nothing (under no_sync() or no_grad) after "
                        "forward %d" % x[2])
            return "in the backward of its forward %d" % x[2]
        ranks = "; ".join("rank %d %s" % (r, where(x))
                          for r, x in enumerate(recs))
        return ("%s: the ranks are out of step: %s. Every forward under grad "
                "through the wrapper is followed by one backward on every "
                "rank (a backward is missing on some rank, or one ran an "
                "extra forward; run forwards without backward under "
                "torch.no_grad()). Every rank raised this error and nothing "
                "was reduced; the next forward starts a step on every rank "
                "(zero the gradients first)" % (self._lt_name(), ranks))

    def forward(self, *args, **kwargs):
        self._lt_check_open(_W + ".forward")
        grad = torch.is_grad_enabled()
        sync = self.require_backward_grad_sync
        bcast = self.broadcast_buffers and self._size > 1 and \
            len(self._buffers) > 0
        code, index = self._check_state()
        if grad and sync:
            self._agree_step(_FORWARD, code, index)
        elif bcast:  # a collective: agreed too
            self._agree_step(_FORWARD_LOCAL, code, index)
        elif code:
            raise self._mistake(code, index, L.lib.tpdp_comm_rank(self._host))
        if bcast:  # as torch, under no_sync() too
            self._broadcast(self._buffers)
        if grad:
            self._armed, self._armed_sync = True, sync
            if sync:
                self._forwards += 1
        return self.module(*args, **kwargs)

    def _grad_hook(self, i):
        """The hook of gradient i (its accumulation is done): hands it to
        the reducer. As weak_hook, it holds the wrapper weakly; it is
        weak_hook and the readiness check in one function, as it runs once per
        parameter per backward (bench/torch_ddp.sh's hook_us_per_param): in
        view mode the common case is the slot's own tensor, one identity
        and one address compare."""
        ref, p = weakref.ref(self), self._params[i]
        # fixed while the wrapper is open (close() sets _lt_reason first)
        mark, r, cv = L.lib.tpdp_reducer_mark_ready, self._r, self._cv
        view = self.gradient_as_bucket_view

        def hook(*_):
            o = ref()
            if o is None or o._lt_reason is not None:
                return
            if not o._in_iter:
                if not o._armed:
                    return  # no forward armed this backward: local, as torch
                o._begin()
            g = p.grad
            if not view or g is not cv.tensors[i] or \
                    g.data_ptr() != cv.ptrs[i]:
                o._take_grad(i, p, g)
            st = mark(r, i)
            if st:
                L.check(st, "tpdp_reducer_mark_ready(%s)" % o._names[i])
        return hook

    def _take_grad(self, i, p, g):
        """Gradient i into its slot when p.grad is not the slot's tensor."""
        if g.shape != p.shape:
            self._refuse_late(i, p)
        elif self.gradient_as_bucket_view:
            self._adopt(i, p, g)
        else:
            with torch.no_grad():
                self._slot[i].copy_(g)

    def _refuse_late(self, i, p):
        """A gradient of another shape seen inside a backward: it counts as
        zeros (the other ranks are reducing already) and raises at the end
        of this backward, on this rank."""
        with torch.no_grad():
            self._slot[i].zero_()
        if self._late is None:
            self._late = self._mistake(_GRAD_SHAPE, i, L.lib.tpdp_comm_rank(
                self._host))

    def _begin(self):
        sync = self._armed_sync
        self._armed = False
        if sync:
            self._agree_step(_BACKWARD)
        if sync != self._sync_now:
            L.call("tpdp_reducer_set_sync", self._r, int(sync))
            self._sync_now = sync
        L.call("tpdp_reducer_prepare", self._r)
        self._in_iter = True
        torch.autograd.Variable._execution_engine.queue_callback(self._end)
        if not self._rebuilt and L.lib.tpdp_reducer_rebuilt(self._r):
            # The buckets moved into gradient-ready order (the old memory
            # is gone): every tensor over a slot follows its gradient.
            self._rebuilt = True
            for i in range(len(self._params)):
                self._slot[i] = _slot_tensor(self._r, i)
                self._cv.move(i, self._slot[i])

    def _end(self):
        if self._r is None:  # closed inside the backward
            return
        self._in_iter = False
        L.call("tpdp_reducer_finalize", self._r)
        if self._sync_now:
            self._backwards += 1
        with torch.no_grad():
            for i, p in enumerate(self._params):
                if self.gradient_as_bucket_view:
                    if p.grad is None:  # unused here after set_to_none
                        p.grad = self._cv.get(i)
                elif self._sync_now:
                    g = p.grad
                    if g is None or g.shape != p.shape:
                        if self._own[i].shape != p.shape:  # resized
                            self._own[i] = torch.empty_like(p)
                        g = p.grad = self._own[i]
                    g.copy_(self._slot[i])
        if self._late is not None:
            late, self._late = self._late, None
            raise late

    # ---------------------------------------------------------- no_sync

    def no_sync(self):
        """A context: backward passes of forwards inside accumulate
        locally; the next synchronised one reduces the sum."""
        self._lt_check_open(_W + ".no_sync")
        return self._no_sync()

    @contextlib.contextmanager
    def _no_sync(self):
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # ------------------------------------------------------ inspection

    def bucket_indices(self):
        """Parameter indices of each bucket, in launch order."""
        self._lt_check_open(_W + ".bucket_indices")
        out = []
        for b in range(L.lib.tpdp_reducer_num_buckets(self._r)):
            idx = ctypes.POINTER(ctypes.c_int64)()
            cnt = ctypes.c_int64()
            L.call("tpdp_reducer_bucket", self._r, b, ctypes.byref(idx),
                   ctypes.byref(cnt), None, None)
            out.append([idx[k] for k in range(cnt.value)])
        return out

    def unused_parameters(self):
        """Names of the parameters treated as unused by the last step."""
        self._lt_check_open(_W + ".unused_parameters")
        idx = ctypes.POINTER(ctypes.c_int64)()
        cnt = ctypes.c_int64()
        L.call("tpdp_reducer_unused_params", self._r, ctypes.byref(idx),
               ctypes.byref(cnt))
        return [self._names[idx[k]] for k in range(cnt.value)]

    def stats(self):
        """The reducer's accumulated time: total, comm, data seconds and
        the iteration count."""
        self._lt_check_open(_W + ".stats")
        s = L.ReducerStats()
        L.call("tpdp_reducer_get_stats", self._r, ctypes.byref(s))
        return {"total_seconds": s.total_seconds,
                "comm_seconds": s.comm_seconds,
                "data_seconds": s.data_seconds, "iterations": s.iterations}

    # ---------------------------------------------------------- lifetime

    def close(self):
        """Destroy the reducer: hooks removed, each gradient moved into a
        tensor of its own (its values kept). Afterwards the wrapper's
        methods raise TpdpError(TPDP_ERR_STATE); the module trains on
        alone, or is wrapped again. Also done when the mesh is closed, when
        the wrapper is collected, and at exit. Local: call it on every
        rank, between steps."""
        self._lt_close("close() was called")

    def _release(self):
        """Hooks off, gradients into memory of their own, the reducer
        destroyed (see close())."""
        for h in self._hook_handles:
            h.remove()
        self._hook_handles, self._acc = [], []
        WRAPPED.release(self)
        r, self._r = self._r, None
        self._in_iter = self._armed = False
        if r is None:
            return
        self._cv.release()
        self._slot = []
        L.call("tpdp_reducer_destroy", r)

