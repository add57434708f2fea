# SPDX-License-Identifier: BSD-3-Clause
"""DistributedDataParallel over tpdp's reducer.

Each parameter's .grad is a view into the reducer's bucket memory (or, with
gradient_as_bucket_view=False, a tensor the reducer copies from and to).
A hook on each parameter's AccumulateGrad node (register_post_accumulate_
grad_hook where torch has it) marks the gradient ready; the first one of a
backward starts the reducer's iteration and queues the finalize at the end
of backward on the autograd engine.
"""
import contextlib
import ctypes

import torch
from torch import nn

from .. import _lib as L
from ._dlpack import FLOAT_DTYPES, View, to_torch
from ._mesh import broadcast_, track, world_mesh

_HOOKS = {None: L.HOOK_NONE, "bf16": L.HOOK_BF16, "fp16": L.HOOK_F16}
# torch's DDP: the first bucket 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES).
FIRST_BUCKET_BYTES = 1024 * 1024


class DistributedDataParallel(nn.Module):
    """torch.nn.parallel.DistributedDataParallel's names and meanings,
    reduced over `device_mesh` (1-D; all ranks when None)."""

    def __init__(self, module, device_mesh=None, bucket_cap_mb=25,
                 find_unused_parameters=False, gradient_as_bucket_view=True,
                 broadcast_buffers=True, comm_hook=None):
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError("tpdp.torch.DistributedDataParallel: module is "
                            "a %s, not a torch.nn.Module"
                            % type(module).__name__)
        if comm_hook not in _HOOKS:
            raise ValueError("tpdp.torch.DistributedDataParallel: comm_hook "
                             "%r: use None, 'bf16' or 'fp16'" % (comm_hook,))
        if not bucket_cap_mb > 0:
            raise ValueError("tpdp.torch.DistributedDataParallel: "
                             "bucket_cap_mb %r must be > 0" % (bucket_cap_mb,))
        named = [(n, p) for n, p in module.named_parameters()
                 if p.requires_grad]
        if not named:
            raise ValueError("tpdp.torch.DistributedDataParallel: the module "
                             "has no parameter that requires grad")
        device = named[0][1].device
        for n, p in named:
            if p.dtype not in FLOAT_DTYPES:
                raise TypeError("tpdp.torch.DistributedDataParallel: "
                                "parameter %r has dtype %s; tpdp reduces "
                                "float32, float64, float16, bfloat16"
                                % (n, p.dtype))
            if p.device != device:
                raise ValueError("tpdp.torch.DistributedDataParallel: "
                                 "parameter %r is on %s, %r on %s: one device"
                                 % (n, p.device, named[0][0], device))
            if not p.is_contiguous():
                raise ValueError("tpdp.torch.DistributedDataParallel: "
                                 "parameter %r is not contiguous" % n)
        if device_mesh is None:
            device_mesh = world_mesh(device.type)
        if device_mesh.ndim != 1:
            raise ValueError("tpdp.torch.DistributedDataParallel: "
                             "device_mesh must be 1-D, e.g. mesh[%r]"
                             % device_mesh.mesh_dim_names[0])
        if device_mesh.device_type != device.type:
            raise ValueError("tpdp.torch.DistributedDataParallel: the mesh "
                             "is for %r, the parameters on %s"
                             % (device_mesh.device_type, device))
        self.module = module
        self.device_mesh = device_mesh
        self.broadcast_buffers = broadcast_buffers
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = True
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        # (owning module, attribute, parameter) to see replacements
        self._slots = []
        for n, p in named:
            owner, _, attr = n.rpartition(".")
            self._slots.append((module.get_submodule(owner), attr, p))
        self._comm = device_mesh.comm()
        self._size = L.lib.tpdp_comm_size(self._comm)
        self._r = None

        # The gradients the reducer starts from (zeros where None).
        grads = []
        for p in self._params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        n = len(self._params)
        arr = (L.ReducerParam * n)()
        self._fqns = [s.encode() for s in self._names]
        views = []
        for i, (p, g) in enumerate(zip(self._params, grads)):
            pv, gv = View(p, "parameter %r" % self._names[i]), View(g)
            arr[i].param, arr[i].grad, arr[i].fqn = pv.t, gv.t, self._fqns[i]
            views.append((pv, gv))
        # In view mode the reducer writes the array until destroy: keep it.
        self._arr, self._own_grads = arr, grads
        opts = L.lib.tpdp_reducer_options_default()
        opts.first_bucket_bytes = FIRST_BUCKET_BYTES
        opts.bucket_cap_bytes = int(bucket_cap_mb * 1024 * 1024)
        opts.gradient_as_bucket_view = int(bool(gradient_as_bucket_view))
        opts.find_unused_parameters = int(bool(find_unused_parameters))
        opts.comm_hook = _HOOKS[comm_hook]
        opts.broadcast_from_rank0 = 1  # DDP copies rank 0's parameters
        if device.type == "cuda":
            opts.producer_stream = torch.cuda.current_stream().cuda_stream
        r = ctypes.c_void_p()
        L.call("tpdp_reducer_create", self._comm, arr, n, ctypes.byref(opts),
               ctypes.byref(r))
        del views
        self._r = r
        track(self)
        self._rebuilt = False
        self._in_iter = False
        self._sync_now = True
        self._sync_next = True
        self._bind_all()
        self._buffers = [b for b in module.buffers()]
        self._sync_buffers()
        self._hook_handles = []
        self._acc = []
        mark = L.lib.tpdp_reducer_mark_ready
        post = getattr(torch.Tensor, "register_post_accumulate_grad_hook",
                       None)
        for i, p in enumerate(self._params):
            hook = self._make_hook(i, mark)
            if post is not None:
                self._hook_handles.append(
                    p.register_post_accumulate_grad_hook(hook))
            else:
                # torch < 2.1: the AccumulateGrad node's post hook, as DDP.
                with torch.enable_grad():  # also when built under no_grad
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._acc.append(acc)  # the hook lives with the node
                self._hook_handles.append(acc.register_hook(hook))

    # ------------------------------------------------------------ grads

    def _bind_all(self, moved=False):
        """p.grad = the reducer's current view of each gradient.

        moved: the buckets were rebuilt inside a backward (the first
        hook's _begin), so only gradients that are still the old views
        follow them (their values moved with the buckets). A gradient that
        is None (zero_grad(set_to_none=True)) stays None, so AccumulateGrad
        starts it afresh, not on top of the last step's values left in the
        bucket; a tensor of autograd's own (the gradient that fired the
        hook) stays for the hook to copy in."""
        old = self._views if moved else None
        n = len(self._params)
        if self.gradient_as_bucket_view:
            self._views = []
            t = L.Tensor()
            for i in range(n):
                L.call("tpdp_reducer_grad_view", self._r, i, ctypes.byref(t))
                self._views.append(to_torch(t).view(self._params[i].shape))
        else:
            self._views = list(self._own_grads)
        for i, (p, v) in enumerate(zip(self._params, self._views)):
            if old is None or p.grad is old[i]:
                p.grad = v

    def _make_hook(self, i, mark):
        p = self._params[i]
        r = self._r

        def hook(*_):
            if not self._in_iter:
                self._begin()
            v = self._views[i]
            g = p.grad
            if g is not v:
                # zero_grad(set_to_none=True), or a gradient assigned by
                # hand: bring it into the reducer's memory.
                v.copy_(g)
                p.grad = v
            st = mark(r, i)
            if st:
                L.check(st, "tpdp_reducer_mark_ready(%s)" % self._names[i])
        return hook

    def _begin(self):
        if self._sync_next != self._sync_now:
            L.call("tpdp_reducer_set_sync", self._r, int(self._sync_next))
            self._sync_now = self._sync_next
        L.call("tpdp_reducer_prepare", self._r)
        self._in_iter = True
        torch.autograd.Variable._execution_engine.queue_callback(self._end)
        if not self._rebuilt and L.lib.tpdp_reducer_rebuilt(self._r):
            # The buckets moved into gradient-ready order: new views.
            self._rebuilt = True
            self._bind_all(moved=True)

    def _end(self):
        self._in_iter = False
        L.call("tpdp_reducer_finalize", self._r)
        for p, v in zip(self._params, self._views):
            if p.grad is not v:  # unused here after set_to_none
                p.grad = v

    # ---------------------------------------------------------- forward

    def forward(self, *args, **kwargs):
        if torch.is_grad_enabled():
            self._check_params()
            self._sync_next = self.require_backward_grad_sync
        if self.broadcast_buffers:  # as torch, under no_sync() too
            self._sync_buffers()
        return self.module(*args, **kwargs)

    def _check_params(self):
        # One dict look-up per parameter (named_parameters() would walk
        # the module tree on every forward).
        for (mod, attr, p), name in zip(self._slots, self._names):
            if mod._parameters.get(attr) is not p:
                raise ValueError(
                    "tpdp.torch.DistributedDataParallel: parameter %r was "
                    "replaced after wrapping; wrap the module again after "
                    "changing its parameters" % name)

    def _sync_buffers(self):
        if self._size > 1:
            for b in self._buffers:
                if b.is_contiguous():
                    broadcast_(b, self._comm, 0)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes of forwards inside accumulate locally; the next
        synchronised one reduces the sum."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # ------------------------------------------------------ inspection

    def bucket_indices(self):
        """Parameter indices of each bucket, in launch order."""
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
        idx = ctypes.POINTER(ctypes.c_int64)()
        cnt = ctypes.c_int64()
        L.call("tpdp_reducer_unused_params", self._r, ctypes.byref(idx),
               ctypes.byref(cnt))
        return [self._names[idx[k]] for k in range(cnt.value)]

    def stats(self):
        """The reducer's accumulated time: total, comm, data seconds and
        the iteration count."""
        s = L.ReducerStats()
        L.call("tpdp_reducer_get_stats", self._r, ctypes.byref(s))
        return {"total_seconds": s.total_seconds,
                "comm_seconds": s.comm_seconds,
                "data_seconds": s.data_seconds, "iterations": s.iterations}

    def close(self):
        """Destroy the reducer (gradients are copied back into tensors of
        their own). Also at exit and when the wrapper is collected."""
        if self._r is not None:
            r, self._r = self._r, None
            for h in self._hook_handles:
                h.remove()
            L.call("tpdp_reducer_destroy", r)
            for p, g in zip(self._params, self._own_grads):
                p.grad = g

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - nothing to report to
            pass
