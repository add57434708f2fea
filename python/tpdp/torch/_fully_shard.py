# SPDX-License-Identifier: BSD-3-Clause
"""fully_shard (torch's _composable/fsdp/fully_shard.py, FSDP2) over the
library's fully sharded units (tpdp/fsdp.h): the sharding, the all-gathers,
the reduce-scatters and the memory are C's; this file mirrors the torch
module tree into a C module tree, drives each unit's hooks from torch's
forward and autograd, and points the torch parameters at the memory the
units hand out.

The parameters. fully_shard replaces each parameter it manages by a new
nn.Parameter over this rank's shard (the unit's f32 master rows, C memory):
what `module.parameters()` and an optimizer see. Around the module's
forward and backward the same Parameter objects are pointed (`.data`) at
the unit's gathered full tensors, and during backward their `.grad` at the
unit's full gradients, into which autograd accumulates in place; after the
step (tpdp_fsdp_finalize) `.grad` is this rank's rows of the mean gradient,
a tensor over the unit's gradient shard handed out through a CViews.

Saved tensors. A tensor autograd saves in a unit's forward that lies in a
gathered parameter's memory (the weight, `weight.t()`) would be read in
backward after the unit resharded and gathered again, possibly elsewhere:
a saved_tensors_hooks pair, active while any unit of the tree runs its
forward, saves such a tensor as (unit, parameter, offset, sizes, strides)
and rebuilds it over the parameter's current gathered memory when backward
unpacks it. No saved tensor keeps C memory.

Hooks (torch 1.13 and 2.x alike): the module's class becomes FSDP<Class>,
whose __call__ gathers before the module's own hooks and forward and
reshards after (also when the forward raises); each floating input that
requires grad passes through _PostBackward, whose backward runs once the
module's backward is done (every node of the module's forward has a higher
sequence number, so autograd has run them, the gradients' accumulation
included); a hook on each output that requires grad gathers again before
the module's backward; the first of those in a backward queues the end of
backward on the autograd engine (queue_callback), which ends the units whose
backward did not run (a root whose inputs are integers, an unused output)
and finalizes the tree. Every outermost forward and every backward starts
with a small allgather of each rank's step record over all ranks: ranks out
of step raise on every rank before any unit's collective.
"""
import ctypes
import functools
import gc
import itertools
import weakref

import torch
from torch import nn

from .. import _lib as L
from . import _heap
from ._agree import Records, agree
from ._dlpack import View, to_torch
from ._fsdp_api import UNIT_DTYPES, MixedPrecisionPolicy
from ._lifetime import (WRAPPED, Claims, CViews, Lifetime,
                        check_parameters_keep_identity, state_error,
                        weak_hook)
from ._mesh import DeviceMesh, world_mesh

_W = "tpdp.torch.fully_shard"
_C_DTYPES = {torch.float32: L.F32, torch.bfloat16: L.BF16,
             torch.float16: L.F16}
# The Python side's view of a unit's state (C's handle states).
_IDLE, _FORWARD, _BWD_PRE, _BWD_POST = "IDLE", "FORWARD", "BACKWARD_PRE", \
    "BACKWARD_POST"
# Phases of a step record.
_PH_FORWARD, _PH_FORWARD_NOGRAD, _PH_BACKWARD, _PH_UNSHARD = 0, 1, 2, 3
_PHASES = {_PH_FORWARD: "in a forward under grad",
           _PH_FORWARD_NOGRAD: "in a forward without grad",
           _PH_BACKWARD: "in a backward", _PH_UNSHARD: "in unshard()"}
_serial = itertools.count(1)
# torch modules a unit mirrored into its C tree, held by that unit.
_MIRRORED = Claims()


def _err(status, message):
    return L.TpdpError(status, "%s: %s" % (_W, message), _W)


def _map(fn, x):
    """fn applied to every tensor of x (tuples, lists, dicts)."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_map(fn, v) for v in x)
    if isinstance(x, list):
        return [_map(fn, v) for v in x]
    if isinstance(x, dict):
        return {k: _map(fn, v) for k, v in x.items()}
    return x


def _tensors(x, out, named=True):
    """Every tensor of x (tuples, lists, dicts; namedtuples unless not
    `named`, as _map) into out."""
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (tuple, list)) and (named or not hasattr(x,
                                                                "_fields")):
        for v in x:
            _tensors(v, out, named)
    elif isinstance(x, dict):
        for v in x.values():
            _tensors(v, out, named)
    return out


def unit_of(module):
    """The fully_shard unit of `module` (open or closed), else None."""
    return module.__dict__.get("_tpdp_fsdp") if isinstance(
        module, nn.Module) else None


# ----------------------------------------------------------- saved tensors

class _PackedParam:
    """A saved tensor that lay in a gathered parameter's memory."""
    __slots__ = ("unit", "index", "offset", "size", "stride")

    def __init__(self, unit, index, offset, size, stride):
        self.unit, self.index = weakref.ref(unit), index
        self.offset, self.size, self.stride = offset, size, stride


def _make_pack(tree_ref):
    # What pack returns for an ordinary tensor is t.detach(), not t: the
    # same memory, without t's grad_fn. An output its own node saves
    # (tanh's, softmax's) would otherwise hold that node, which holds it,
    # in a cycle Python's collector cannot see, and a forward that no
    # backward follows would keep all its activations. unpack hands it back
    # as it is; autograd attaches what it needs from the saved variable.
    def pack(t):
        tree = tree_ref()
        if tree is None or not tree.full_ranges or t.layout != torch.strided \
                or t.numel() == 0:
            return t.detach()
        p = t.data_ptr()
        for ref, ranges in tree.full_ranges.values():
            for lo, hi, i, dtype in ranges:
                if lo <= p < hi:
                    unit = ref()
                    if t.dtype != dtype:
                        raise _err("TPDP_ERR_UNSUPPORTED",
                                   "autograd saves a %s view of parameter %r "
                                   "of %s, whose gathered dtype is %s"
                                   % (t.dtype, unit._fqns[i],
                                      unit._lt_name(), dtype))
                    return _PackedParam(unit, i,
                                        (p - lo) // t.element_size(),
                                        tuple(t.shape), t.stride())
        return t.detach()
    return pack


def _unpack(x):
    if not isinstance(x, _PackedParam):
        return x
    unit = x.unit()
    if unit is None or unit.closed:
        raise state_error(_W, "the backward needs a parameter of a unit that "
                          "is closed (%s)" % (
                              unit._lt_reason if unit else "collected"))
    base = unit._gathered(x.index)
    return base.as_strided(x.size, x.stride, x.offset)


class _PostBackward(torch.autograd.Function):
    """Identity on a unit's floating inputs; its backward runs after the
    unit's backward: the unit's post-backward (reduce-scatter)."""

    @staticmethod
    def forward(ctx, ref, *tensors):
        ctx.ref = ref
        return tuple(t.view_as(t) for t in tensors)

    @staticmethod
    def backward(ctx, *grads):
        unit = ctx.ref()
        if unit is not None and not unit.closed:
            unit._post_backward()
        return (None,) + grads


# ------------------------------------------------------------------ tree

class _Tree:
    """The C module tree a model's units live in (units nest only inside
    one tree): its top module, the torch modules mirrored in it, and the
    step's bookkeeping, shared by its units. Trees merge when fully_shard
    is applied to a module containing the tops of others."""

    def __init__(self):
        self.top = None         # tpdp_module*, parentless
        self.top_unit = None    # weak ref of the unit of the top module
        self.units = []         # weak refs, creation order
        self.keep = []          # tensors C params viewed (a failed creation)
        self.closing = False
        self.broken = None      # why the tree cannot run, or None
        self.records = Records(L.world(), 6)
        self.seq = 0            # step records exchanged
        self.steps = 0          # finalizes
        self.sync = True        # tpdp_fsdp_set_requires_gradient_sync
        self.depth = 0          # unit forwards in progress
        self.hooks_ctx = None   # the saved_tensors_hooks entered
        # id(unit) -> (its weak ref, [(lo, hi, index, dtype)]): the
        # gathered parameters' memory, for the saved tensors' pack
        self.full_ranges = {}
        self.order = []         # weak refs: units run forward under grad
        self.in_backward = False
        self.trimmed = False    # the heap trimmed in this backward
        self.pack = _make_pack(weakref.ref(self))

    def live_units(self):
        return [u for u in (r() for r in self.units)
                if u is not None and not u.closed]

    def merge(self, other):
        """Take over `other`'s units (its top becomes a child of ours)."""
        for ref in other.units:
            u = ref()
            if u is not None:
                u._tree = self
                self.units.append(ref)
        self.keep += other.keep
        self.sync = self.sync and other.sync
        other.units, other.top, other.keep = [], None, []

    def exchange(self, phase, code=0, index=-1):
        """Every rank's step record compared: ranks in another phase or
        step raise on every rank (and the tree is broken: its units' C
        states differ across ranks), a mistake found on one rank raises
        on every rank."""
        rec = [self.seq, phase, self.steps, int(self.sync), code, index]
        recs = self.records.exchange(rec)
        self.seq += 1
        if any(x[:4] != rec[:4] for x in recs):
            def where(x):
                return "%s of step %d%s" % (
                    _PHASES.get(x[1], "?"), x[2] + 1,
                    "" if x[3] else " (gradient sync off)")
            self.broken = (
                "the ranks are out of step: %s. Every rank must run the same "
                "forwards and backwards of the fully sharded model (and "
                "set_requires_gradient_sync alike): a backward is missing or "
                "extra on some rank. The units' states now differ across "
                "ranks: close() the model's units and build it again" % "; "
                .join("rank %d %s" % (r, where(x))
                      for r, x in enumerate(recs)))
            raise state_error(_W, self.broken)
        for r, x in enumerate(recs):
            if x[4]:
                raise self.mistake(x[4], x[5], r)

    def check(self):
        """(code, index) of the first managed parameter replaced in its
        module (index over the tree's units' parameters), else (0, -1)."""
        k = 0
        for u in self.live_units():
            for d, attr, i in u._slots:
                if d.get(attr) is not u._params[i]:
                    return 1, k + i
            k += len(u._params)
        return 0, -1

    def mistake(self, code, index, rank):
        for u in self.live_units():
            if index < len(u._params):
                return ValueError(
                    "%s: parameter %r of %s was replaced after fully_shard "
                    "(rank %d): the unit gathers into the Parameter it made; "
                    "copy values into it in place instead (p.data.copy_)"
                    % (_W, u._fqns[index], u._lt_name(), rank))
            index -= len(u._params)
        return ValueError("%s: a parameter was replaced (rank %d)" % (_W,
                                                                      rank))

    def end_backward(self):
        """The autograd engine's callback at the end of a backward."""
        self.in_backward = False
        units = self.live_units()
        if self.broken or not units:
            return
        order = [u for u in (r() for r in self.order)
                 if u is not None and not u.closed]
        self.order = []
        # The units whose backward did not run (or did not end), in reverse
        # forward order, then the rest (an unshard(), a forward without
        # grad) in reverse creation order: the same on every rank.
        pending = [u for u in reversed(order)]
        pending += [u for u in reversed(units) if u not in pending]
        for u in pending:
            if u._state in (_FORWARD, _BWD_PRE):
                u._post_backward(ended=True)
        late = [u._late for u in units if u._late is not None]
        for u in units:
            u._late = None
        if self.sync:
            for u in units:
                u._stash_grads()
            root = self.top_unit() if self.top_unit else None
            if root is None or root.closed:
                raise state_error(_W, "the tree has no root unit")
            L.call("tpdp_fsdp_finalize", root._cunit)
            self.steps += 1
            for u in units:
                u._state = _IDLE
                u._point()
                u._apply_grads()
        if late:
            raise late[0]

    def release(self, reason):
        """Close every unit of the tree, then destroy the C tree."""
        if self.closing:
            return
        self.closing = True
        try:
            for u in self.live_units():
                u._lt_close(reason)
        finally:
            top, self.top = self.top, None
            if self.hooks_ctx is not None:
                ctx, self.hooks_ctx = self.hooks_ctx, None
                try:
                    ctx.__exit__(None, None, None)
                except Exception:  # noqa: BLE001 - another ctx on top
                    pass
            self.full_ranges = {}
            if top is not None:
                L.call("tpdp_module_destroy", top)
            self.keep = []


# ------------------------------------------------------------------ units

class _Unit(Lifetime):
    """One fully_shard call: a tpdp_fsdp_unit over a mirrored module."""

    def __init__(self, plan, tree, cmod, cunit, meshes):
        self._serial = next(_serial)
        self._cls = plan.cls_name
        self._fqn = ""  # in its tree (set when a parent adopts it)
        self._mesh = plan.mesh
        self._tree = tree
        self._cmod, self._cunit = cmod, cunit
        self._policy = plan.mp
        self._trim = plan.trim
        self._state = _IDLE
        self._armed = False      # a forward under grad awaits its backward
        self._unsharded = False  # unshard() began a forward
        self._late = None        # an error found inside backward
        self._stashed = False
        self._params, self._cparams, self._fqns, self._stash = [], [], [], []
        self._pcache, self._gcache, self._slots = [], [], []
        self._cv = CViews(None, 0)
        self._lt_start(meshes)

    def _lt_name(self):
        where = "the root %s" % self._cls if not self._fqn else \
            "%r (%s)" % (self._fqn, self._cls)
        return "fully_shard unit #%d, %s over %r" % (self._serial, where,
                                                     self._mesh)

    # -- views of C memory

    def _view(self, cache, i, t):
        key = (t.data, t.dtype, t.ndim, tuple(t.shape[:t.ndim]))
        hit = cache[i]
        if hit is not None and hit[0] == key:
            return hit[1]
        # Made outside inference mode even when the first gather runs
        # inside it: an inference tensor, kept and later a Parameter's
        # .data, could never be saved for a backward.
        with torch.inference_mode(False):
            x = to_torch(t)
        cache[i] = (key, x)
        return x

    def _point(self, full_grads=False):
        """Each managed Parameter's .data at the unit's current view of it
        (shard or gathered); with full_grads its .grad at the unit's full
        gradient (during backward); the pack ranges follow."""
        lib = L.lib
        ranges = []
        for i, h in enumerate(self._cparams):
            x = self._view(self._pcache, i, lib.tpdp_param_tensor(h)[0])
            p = self._params[i]
            if full_grads:
                p.grad = None
            if p.data_ptr() != x.data_ptr() or p.shape != x.shape or \
                    p.dtype != x.dtype:
                p.data = x
            if x.shape != self._shard_shapes[i] or \
                    x.data_ptr() != self._shard_ptrs[i]:
                n = x.numel() * x.element_size()
                ranges.append((x.data_ptr(), x.data_ptr() + n, i, x.dtype))
            if full_grads:
                p.grad = self._view(self._gcache, i,
                                    lib.tpdp_param_grad(h)[0])
        if ranges:
            self._tree.full_ranges[id(self)] = (weakref.ref(self), ranges)
        else:
            self._tree.full_ranges.pop(id(self), None)

    def _gathered(self, i):
        """Parameter i's gathered tensor, for a saved tensor's unpack."""
        hit = self._pcache[i]
        if self._state != _BWD_PRE or hit is None or \
                hit[1].shape != self._full_shapes[i]:
            raise state_error(
                _W, "the backward of %s needs its gathered parameter %r, but "
                "the unit is in state %s: a second backward through one "
                "forward's graph (retain_graph=True), or a unit run twice in "
                "one forward, is not supported"
                % (self._lt_name(), self._fqns[i], self._state))
        return hit[1]


    # -- gradients across steps (FSDP2: the new mean is added to p.grad)

    def _stash_grads(self):
        """Before the units write this step's mean into the gradient
        shards: what each p.grad holds, to add the mean to it."""
        if self._stashed:
            return
        self._stashed = True
        for i, p in enumerate(self._params):
            g, s = p.grad, None
            if g is None:
                pass
            elif self._cv.is_given(i, g):
                with torch.no_grad():
                    if bool(g.any()):
                        s = ("ours", g.clone())
            elif g.shape == self._shard_shapes[i]:
                s = ("user", g)
            elif self._late is None:
                self._late = ValueError(
                    "%s: the gradient of parameter %r of %s has shape %s, "
                    "its shard %s (rank %d): it was left out of this step; "
                    "set p.grad = None" % (
                        _W, self._fqns[i], self._lt_name(), tuple(g.shape),
                        tuple(self._shard_shapes[i]), L.lib.tpdp_comm_rank(
                            L.world())))
            self._stash[i] = s

    def _apply_grads(self):
        with torch.no_grad():
            for i, p in enumerate(self._params):
                mean = self._cv.get(i)
                s, self._stash[i] = self._stash[i], None
                if s is None:
                    p.grad = mean
                elif s[0] == "ours":
                    mean.add_(s[1])
                    p.grad = mean
                else:
                    s[1].add_(mean)
                    p.grad = s[1]
        self._stashed = False

    # -- forward

    def _pre_forward(self, args, kwargs):
        tree = self._tree
        if tree.broken:
            raise state_error(_W, "%s: %s" % (self._lt_name(), tree.broken))
        grad = torch.is_grad_enabled()
        outer = tree.depth == 0
        if outer:
            code, index = tree.check()
            tree.exchange(_PH_FORWARD if grad else _PH_FORWARD_NOGRAD, code,
                          index)
        L.call("tpdp_module_forward_begin", self._cmod)
        self._state = _FORWARD
        tree.depth += 1
        try:
            self._point()
            if outer and grad:
                ctx = torch.autograd.graph.saved_tensors_hooks(tree.pack,
                                                               _unpack)
                ctx.__enter__()
                tree.hooks_ctx = ctx
            if grad:
                if not self._armed:
                    tree.order.append(weakref.ref(self))
                self._armed = True
            mp = self._policy
            if mp.cast_forward_inputs and mp.param_dtype is not None:
                def cast(t):
                    return t.to(mp.param_dtype) if t.is_floating_point() \
                        else t
                args, kwargs = _map(cast, args), _map(cast, kwargs)
            if grad:
                args, kwargs = self._register_post_backward(args, kwargs)
        except BaseException:
            self._abort_forward()
            raise
        return args, kwargs

    def _register_post_backward(self, args, kwargs):
        flat = [t for t in _tensors((args, kwargs), [], named=False)
                if t.requires_grad and t.is_floating_point()]
        if not flat:
            return args, kwargs
        out = _PostBackward.apply(weakref.ref(self), *flat)
        swap = {id(t): o for t, o in zip(flat, out)}

        def put(t):
            return swap.get(id(t), t)
        return _map(put, args), _map(put, kwargs)

    def _end_forward(self):
        tree = self._tree
        tree.depth -= 1
        try:
            L.call("tpdp_module_forward_end", self._cmod)
            self._point()
        finally:
            if tree.depth == 0 and tree.hooks_ctx is not None:
                ctx, tree.hooks_ctx = tree.hooks_ctx, None
                ctx.__exit__(None, None, None)

    def _abort_forward(self):
        """The forward raised: end it (the hooks, the C forward); the
        step's forwards start over."""
        tree = self._tree
        try:
            self._end_forward()
        finally:
            if tree.depth == 0:
                for u in (r() for r in tree.order):
                    if u is not None:
                        u._armed = False
                tree.order = []

    def _post_forward(self, out):
        self._end_forward()
        if self._armed:
            for t in _tensors(out, []):
                if t.requires_grad:
                    t.register_hook(weak_hook(self, _Unit._pre_backward))
        dt = self._policy.output_dtype
        if dt is not None:
            out = _map(lambda t: t.to(dt) if t.is_floating_point() else t,
                       out)
        return out

    # -- backward

    def _pre_backward(self):
        if self._state != _FORWARD or not self._armed:
            return
        tree = self._tree
        if tree.broken:
            raise state_error(_W, "%s: %s" % (self._lt_name(), tree.broken))
        if not tree.in_backward:
            tree.exchange(_PH_BACKWARD)
            tree.in_backward = True
            tree.trimmed = False
            ref = weakref.ref(tree)

            def end():
                t = ref()
                if t is not None and not t.closing:
                    t.end_backward()
            torch.autograd.Variable._execution_engine.queue_callback(end)
        self._begin_backward()

    def _begin_backward(self):
        self._stash_grads()
        L.call("tpdp_module_backward_begin", self._cmod)
        self._state = _BWD_PRE
        self._point(full_grads=True)

    def _post_backward(self, ended=False):
        """The unit's backward is done (or, `ended`, the whole backward
        is: a unit whose backward did not run gets one now)."""
        if self._state == _FORWARD and ended:
            self._begin_backward()
        if self._state != _BWD_PRE:
            return
        L.call("tpdp_module_backward_end", self._cmod)
        self._state = _BWD_POST
        self._armed = self._unsharded = False
        for p in self._params:
            p.grad = None
        self._point()
        tree = self._tree
        if self._trim and not tree.trimmed and (
                ended or self._last_inner_backward()):
            tree.trimmed = True
            _heap.trim_if_large(self._trim)

    def _last_inner_backward(self):
        """Whether every unit of this step's forward has begun its
        backward: what is left of it belongs to the outer units (the root's
        embedding and its vocabulary-sized gradients: the step's peak).
        That is where the free heap chunks go back to the OS (_heap.py):
        once a backward, rather than after each unit, whose activations the
        next unit's backward would fault in again (a model of one unit
        trims when its backward ends)."""
        for r in self._tree.order:
            u = r()
            if u is not None and u is not self and u._state == _FORWARD:
                return False
        return True

    # -- lifetime

    def _release(self):
        tree = self._tree
        tree.full_ranges.pop(id(self), None)
        # the copies are the parameters from now on: not inference tensors
        # (close() called inside torch.inference_mode), no graph
        with torch.inference_mode(False), torch.no_grad():
            for i, p in enumerate(self._params):
                g = p.grad
                s = self._stash[i]
                if s is not None:  # mid-step: what p.grad held before
                    p.grad = None
                    p.data = p.data.clone()
                    p.grad = s[1]
                    continue
                if g is not None and not self._cv.is_given(i, g) and \
                        g.shape != self._shard_shapes[i]:
                    p.grad = None  # a full gradient mid-step
                p.data = p.data.clone()
        self._cv.release()
        self._pcache = [None] * len(self._params)
        self._gcache = [None] * len(self._params)
        # This unit's memory goes back now, not with the whole tree, so
        # that the copies above never coexist with every unit's memory;
        # mid-step C refuses (nothing changed) and it stays until the tree
        # is destroyed. Only while the C tree exists: a unit collected
        # after its tree was destroyed (the garbage collector clears the
        # weak references of a cycle's units before finalizing any, so the
        # tree's release does not see them) went with it.
        if tree.top is not None and L.has("tpdp_fsdp_release") and \
                L.lib.tpdp_fsdp_release(self._cunit) == 0:
            self._cunit = None
        WRAPPED.release(self)
        _MIRRORED.release(self)
        tree.release("%s was closed" % self._lt_name())


# ----------------------------------------------------------- the module

class FSDPModule:
    """What fully_shard mixes into a module (its class becomes
    FSDP<Class>): the unit's gather around each call, and FSDP2's
    methods."""

    def __call__(self, *args, **kwargs):
        unit = unit_of(self)
        unit._lt_check_open("%s: the forward of %s" % (_W, type(self)
                                                       .__name__))
        args, kwargs = unit._pre_forward(args, kwargs)
        try:
            out = super().__call__(*args, **kwargs)
        except BaseException:
            unit._abort_forward()
            raise
        return unit._post_forward(out)

    def _fsdp_unit(self, what):
        unit = unit_of(self)
        unit._lt_check_open("%s.%s" % (_W, what))
        if unit._tree.broken:
            raise state_error(_W, "%s: %s" % (unit._lt_name(),
                                              unit._tree.broken))
        return unit

    def unshard(self, async_op=False):
        """Gather this unit's parameters now (collective over its mesh;
        between steps or before its forward): the next forward finds them
        gathered. The all-gather has completed when this returns; with
        async_op=True the handle returned has a no-op wait()."""
        unit = self._fsdp_unit("unshard")
        tree = unit._tree
        if tree.in_backward or unit._state == _BWD_PRE:
            raise state_error(_W, "%s: unshard() during backward"
                              % unit._lt_name())
        if not unit._unsharded:
            if tree.depth == 0:
                tree.exchange(_PH_UNSHARD)
            L.call("tpdp_module_forward_begin", unit._cmod)
            unit._state = _FORWARD
            unit._unsharded = True
            unit._point()
        return _UnshardHandle() if async_op else None

    def reshard(self):
        """Free the parameters unshard() gathered. The root unit and units
        with reshard_after_forward=False keep theirs until the end of the
        step (the library frees them at finalize)."""
        unit = self._fsdp_unit("reshard")
        if unit._unsharded:
            unit._unsharded = False
            L.call("tpdp_module_forward_end", unit._cmod)
            unit._point()

    def set_requires_gradient_sync(self, requires_gradient_sync, *,
                                   recurse=True):
        """False: the following backwards accumulate gradients locally
        (no reduce-scatter); the next backward with True reduces the sum
        and the step ends. Applies to every unit of the model: call it on
        the root unit, on every rank alike."""
        unit = self._fsdp_unit("set_requires_gradient_sync")
        if not isinstance(requires_gradient_sync, bool):
            raise TypeError("%s.set_requires_gradient_sync: %r: True or "
                            "False" % (_W, requires_gradient_sync))
        tree = unit._tree
        root = tree.top_unit() if tree.top_unit else None
        if root is not unit or (not recurse and len(tree.live_units()) > 1):
            raise _err("TPDP_ERR_UNSUPPORTED",
                       "set_requires_gradient_sync on %s: tpdp's units of "
                       "one model synchronise together; call it on the root "
                       "unit%s with recurse=True" % (
                           unit._lt_name(), " (%s)" % root._lt_name()
                           if root is not None and root is not unit else ""))
        L.call("tpdp_fsdp_set_requires_gradient_sync", unit._cunit,
               int(requires_gradient_sync))
        tree.sync = requires_gradient_sync

    def fsdp_stats(self):
        """The root unit's accounting of the last step (tpdp_fsdp_stats):
        persistent and peak transient bytes, all-gathers, reduce-scatters
        and their bytes, per rank."""
        unit = self._fsdp_unit("fsdp_stats")
        s = L.FsdpStats()
        L.call("tpdp_fsdp_get_stats", unit._cunit, ctypes.byref(s))
        return {k: getattr(s, k) for k, _ in L.FsdpStats._fields_}

    def close(self):
        """Destroy the units of this model (every unit of its tree: they
        live in one C tree): each parameter keeps this rank's shard, in
        memory of its own, and its gradient. The module cannot run forward
        afterwards (its parameters are shards). Local: call it on every
        rank, between steps. Also done when the mesh closes, when the
        module is collected, and at exit."""
        unit = unit_of(self)
        if unit is not None:
            unit.close()


def _grad_shard(cparams, i):
    """A new tensor over parameter i's gradient shard (after finalize), for
    a unit's CViews."""
    return to_torch(L.lib.tpdp_param_grad(cparams[i])[0])


class _UnshardHandle:
    def wait(self):
        pass


_classes = {}


def _fsdp_class(cls):
    c = _classes.get(cls)
    if c is None:
        c = _classes[cls] = type("FSDP" + cls.__name__, (FSDPModule, cls),
                                 {"__module__": cls.__module__})
    return c


# ------------------------------------------------------------ fully_shard

class _Plan:
    """fully_shard's arguments, checked, and what it will do."""


def _mesh_of(mesh, device):
    if mesh is None:
        return world_mesh(device.type)
    if not isinstance(mesh, DeviceMesh):
        raise TypeError("%s: mesh is a %s, not a tpdp.torch.DeviceMesh (from "
                        "tpdp.torch.init_device_mesh)" % (
                            _W, type(mesh).__name__))
    mesh._lt_check_open("%s (mesh)" % _W)
    if mesh.ndim not in (1, 2):
        raise ValueError("%s: mesh %r: 1-D (FSDP) or 2-D (HSDP: "
                         "(dp_replicate, dp_shard)), e.g. mesh[%r]"
                         % (_W, mesh, mesh.mesh_dim_names[-1]))
    if mesh.ndim == 2 and mesh._shape[0] > 1 and \
            L.FULLY_SHARD_OPTIONS_VERSION < 3:
        raise _err("TPDP_ERR_UNSUPPORTED",
                   "mesh %r: HSDP (a 2-D mesh of more than one replica) "
                   "needs a libtpdp whose tpdp_fully_shard_options have "
                   "version 3 (the replicate communicator); this one has "
                   "version %d" % (mesh, L.FULLY_SHARD_OPTIONS_VERSION))
    if mesh.device_type != device.type:
        raise ValueError("%s: mesh is for %r, the parameters are on %s"
                         % (_W, mesh.device_type, device))
    return mesh


def _walk(module):
    """Pre-order over module's subtree, not entering other units' trees:
    [(fqn, module, parent, name, nested unit or None)]. (A loop, not a
    recursive closure: that would be a reference cycle holding the
    module until a garbage collection.)"""
    out, seen = [], {}
    stack = [("", module, None, None)]
    while stack:
        fqn, m, parent, name = stack.pop()
        if id(m) in seen:
            raise ValueError("%s: module %r appears twice in the module, as "
                             "%r and %r: tpdp's module tree holds a module "
                             "once" % (_W, type(m).__name__, seen[id(m)],
                                       fqn))
        seen[id(m)] = fqn
        u = unit_of(m)
        if m is not module and u is not None and not u.closed:
            out.append((fqn, m, parent, name, u))
            continue
        out.append((fqn, m, parent, name, None))
        kids = [(fqn + "." + n if fqn else n, c, m, n)
                for n, c in m._modules.items() if c is not None]
        stack.extend(reversed(kids))
    return out


def _stale_optimizers(params, names):
    """An optimizer alive now that holds one of `params` (by id): names
    the first such parameter and the optimizer's class, else None."""
    def scan():
        ids = {id(p): n for p, n in zip(params, names)}
        for o in gc.get_objects():
            # type(), not isinstance: some objects warn on __class__
            if issubclass(type(o), torch.optim.Optimizer):
                for group in o.param_groups:
                    for p in group.get("params", ()):
                        if id(p) in ids:
                            return ids[id(p)], type(o).__name__
        return None
    if scan() is None:
        return None
    gc.collect()  # one dropped but not yet collected is no misuse
    return scan()


# A tensor's own hooks (torch keeps them on the tensor object) and where.
_PARAM_HOOKS = (("register_hook", "_backward_hooks"),
                ("register_post_accumulate_grad_hook",
                 "_post_accumulate_grad_hooks"))


def _as_policy(mp_policy):
    """tpdp.torch's MixedPrecisionPolicy of `mp_policy`: itself, or made
    from FSDP2's own (torch.distributed.fsdp.MixedPrecisionPolicy in torch
    2.6+, the same four fields), so that code written for torch's
    fully_shard runs unchanged."""
    if isinstance(mp_policy, MixedPrecisionPolicy):
        return mp_policy
    cls = type(mp_policy)
    fields = ("param_dtype", "reduce_dtype", "output_dtype",
              "cast_forward_inputs")
    if cls.__name__ == "MixedPrecisionPolicy" and \
            all(hasattr(mp_policy, f) for f in fields):
        return MixedPrecisionPolicy(**{f: getattr(mp_policy, f)
                                       for f in fields})
    raise TypeError("%s: mp_policy is a %s.%s, not a MixedPrecisionPolicy "
                    "(tpdp.torch's, or torch.distributed.fsdp's)"
                    % (_W, cls.__module__, cls.__qualname__))


def _check(module, mesh, reshard_after_forward, mp_policy):
    """The plan of fully_shard, or raise (TypeError, ValueError, TpdpError)
    before anything changes."""
    if not isinstance(module, nn.Module):
        raise TypeError("%s: module is a %s, not a torch.nn.Module"
                        % (_W, type(module).__name__))
    if not isinstance(reshard_after_forward, bool):
        if isinstance(reshard_after_forward, int):
            raise ValueError("%s: reshard_after_forward=%d: resharding to "
                             "another number of ranks is not supported; "
                             "True or False" % (_W, reshard_after_forward))
        raise TypeError("%s: reshard_after_forward is a %s: True or False"
                        % (_W, type(reshard_after_forward).__name__))
    mp_policy = _as_policy(mp_policy)
    check_parameters_keep_identity(_W)
    for f in ("param_dtype", "reduce_dtype", "output_dtype"):
        dt = getattr(mp_policy, f)
        if dt is not None and (f != "output_dtype" or not isinstance(
                dt, torch.dtype)) and dt not in UNIT_DTYPES:
            raise ValueError("%s: mp_policy.%s %s: tpdp's units have %s"
                             % (_W, f, dt, ", ".join(str(d) for d in
                                                     UNIT_DTYPES)))
    u = unit_of(module)
    if u is not None and not u.closed:
        raise _err("TPDP_ERR_ALREADY", "the module (a %s) is fully sharded "
                   "already, by %s: apply fully_shard to a module once"
                   % (u._cls, u._lt_name()))
    if u is not None:
        raise _err("TPDP_ERR_STATE", "the module (a %s) was fully sharded "
                   "by %s, which is closed (%s): its parameters are this "
                   "rank's shards" % (u._cls, u._lt_name(), u._lt_reason))
    holder = _MIRRORED.holder(module)
    if holder is not None:
        raise _err("TPDP_ERR_STATE", "the module (a %s) is inside %s "
                   "already: apply fully_shard to the submodules first and "
                   "to their parent (the root) last"
                   % (type(module).__name__, holder._lt_name()))
    walk = _walk(module)
    regs, params, names, nested_params = [], [], [], {}
    for fqn, m, parent, name, nu in walk:
        if nu is not None:
            if nu._tree.broken:
                raise _err("TPDP_ERR_STATE", "submodule %r: %s: %s" % (
                    fqn, nu._lt_name(), nu._tree.broken))
            if nu._tree.top_unit is None or nu._tree.top_unit() is not nu:
                raise _err("TPDP_ERR_STATE", "submodule %r is a unit inside "
                           "another module's units already (%s)"
                           % (fqn, nu._lt_name()))
            for v in nu._tree.live_units():
                for p in v._params:
                    nested_params[id(p)] = (fqn, v)
            continue
        h = _MIRRORED.holder(m)
        if h is not None:
            raise _err("TPDP_ERR_STATE", "submodule %r (a %s) is inside %s "
                       "already" % (fqn, type(m).__name__, h._lt_name()))
        for pn, p in m._parameters.items():
            if p is None:
                continue
            full = fqn + "." + pn if fqn else pn
            regs.append((m._parameters, pn, p, full))
            if any(p is q for q in params):
                continue
            params.append(p)
            names.append(full)
    if not params:
        raise ValueError("%s: the module (a %s) has no parameter outside "
                         "its fully sharded submodules: a unit needs one of "
                         "its own (leave this module as it is)"
                         % (_W, type(module).__name__))
    device = params[0].device
    for p, n in zip(params, names):
        if id(p) in nested_params:
            f, v = nested_params[id(p)]
            raise ValueError("%s: parameter %r is shared with %s (as a "
                             "parameter of submodule %r): a parameter belongs "
                             "to one unit" % (_W, n, v._lt_name(), f))
        h = WRAPPED.holder(p)
        if h is not None:
            raise ValueError(
                "%s: parameter %r is held by %s: close() that wrapper first "
                "(and apply fully_shard before wrapping)" % (
                    _W, n, h._lt_name()))
        hooks = [kind for kind, attr in _PARAM_HOOKS
                 if getattr(p, attr, None)]
        if hooks:
            raise ValueError("%s: parameter %r has hooks of its own (%s): "
                             "fully_shard replaces the parameters by new "
                             "ones, this rank's shards, which would not run "
                             "them; register them after fully_shard, on the "
                             "module's parameters" % (_W, n, ", ".join(hooks)))
        if p.dtype != torch.float32:
            raise TypeError("%s: parameter %r has dtype %s: tpdp's units "
                            "shard float32 parameters (the master copy; "
                            "mp_policy sets the compute dtype)"
                            % (_W, n, p.dtype))
        if p.dim() < 1:
            raise ValueError("%s: parameter %r has no dimension: a unit "
                             "shards dim 0" % (_W, n))
        if not p.is_contiguous():
            raise ValueError("%s: parameter %r is not contiguous" % (_W, n))
        if p.device != device:
            raise ValueError("%s: parameter %r is on %s, %r on %s: one "
                             "device per unit" % (_W, n, p.device, names[0],
                                                  device))
    if device.type not in ("cpu", "cuda"):
        raise ValueError("%s: parameter %r is on %s: tpdp shards 'cpu' and "
                         "'cuda' tensors" % (_W, names[0], device))
    mesh = _mesh_of(mesh, device)
    root = mesh._root()
    for d, size in enumerate(root._shape):
        if d not in mesh._dims and size > 1 and d not in root._tp_dims:
            raise _err("TPDP_ERR_MESH_SIZE",
                       "mesh %r spans %d of the %d ranks: the other dim %r "
                       "(size %d) of %r is neither sharded over here nor "
                       "used by parallelize_module, so the ranks along it "
                       "would train apart; shard over all ranks (mesh=None) "
                       "or parallelize the model over %r first"
                       % (mesh, mesh.size(), root.size(),
                          root.mesh_dim_names[d], size, root,
                          root.mesh_dim_names[d]))
    stale = _stale_optimizers(params, names)
    if stale is not None:
        raise _err("TPDP_ERR_STATE",
                   "parameter %r is held by an optimizer (%s) built before "
                   "fully_shard: fully_shard replaces the parameters by this "
                   "rank's shards, so that optimizer would update tensors "
                   "the model no longer uses; build the optimizer after "
                   "fully_shard" % stale)
    plan = _Plan()
    plan.module, plan.mesh, plan.walk = module, mesh, walk
    plan.regs, plan.params, plan.names = regs, params, names
    plan.device = device
    # torch's freed host memory back to the OS after each post-backward
    plan.trim = _heap.threshold_bytes() if device.type == "cpu" else 0
    plan.cls_name = type(module).__name__
    plan.level = 3 if reshard_after_forward else 2
    pdt = mp_policy.param_dtype or torch.float32
    rdt = mp_policy.reduce_dtype or pdt
    plan.mp, plan.pdt, plan.rdt = mp_policy, pdt, rdt
    plan.same = ["module %s" % plan.cls_name,
                 "reshard_after_forward=%r" % reshard_after_forward,
                 "%r" % (mp_policy,), "mesh %r" % (mesh,)]
    plan.same += ["parameter %r %s%s" % (n, p.dtype, "" if p.requires_grad
                                         else " (no grad)")
                  for p, n in zip(params, names)]
    plan.same += ["fully sharded submodule %r" % f
                  for f, _, _, _, nu in walk if nu is not None]
    plan.shapes = ["parameter %r %s" % (n, tuple(p.shape))
                   for p, n in zip(params, names)]
    # the ranks of one dp group (same coordinates outside the mesh's dims)
    group = 0
    for d, size in enumerate(root._shape):
        if d not in mesh._dims:
            group = group * size + root.get_local_rank(
                root.mesh_dim_names[d])
    plan.group = group
    return plan


def fully_shard(module, *, mesh=None, reshard_after_forward=True,
                mp_policy=MixedPrecisionPolicy()):
    """FSDP2's fully_shard over tpdp's units: shard `module`'s parameters
    (those outside submodules fully sharded before) over `mesh` (1-D:
    FSDP; 2-D (dp_replicate, dp_shard): HSDP; None: all ranks) and gather
    them around its forward and backward. Apply it to submodules first and
    to the root last. reshard_after_forward=True frees the gathered
    parameters after the forward (the root unit keeps them until the end
    of backward), False keeps them until the end of backward. Collective
    over all ranks: every rank calls it with the same module structure and
    options; a mistake found on one rank raises on all. Returns `module`,
    whose class becomes FSDP<Class> (see FSDPModule)."""
    error, plan = None, None
    try:
        plan = _check(module, mesh, reshard_after_forward, mp_policy)
    except (TypeError, ValueError, L.TpdpError) as e:
        error = e
    world = L.world()
    agree(world, error, plan.same if plan else None,
          what="%s: the module or an option" % _W)
    agree(world, None, plan.shapes, what="%s: the parameter shapes of one "
          "data-parallel group" % _W, group=plan.group)
    return _apply(plan)


def _apply(plan):
    module, mesh = plan.module, plan.mesh
    lib = L.lib
    tree = _Tree()
    handles, views, cmods = {}, [], {}
    try:
        for fqn, m, parent, name, nu in plan.walk:
            if nu is not None:
                continue
            h = ctypes.c_void_p()
            cls = m.__dict__.get("_tpdp_cls", type(m).__name__)
            L.call("tpdp_module_create", cls.encode(), ctypes.byref(h))
            if parent is None:
                tree.top = h
            else:
                L.call("tpdp_module_add_child", cmods[id(parent)],
                       name.encode(), h)
            cmods[id(m)] = h
            for pn, p in m._parameters.items():
                if p is None:
                    continue
                ph = handles.get(id(p))
                if ph is None:
                    v = View(p, "parameter %r" % pn)
                    views.append(v)
                    ph = ctypes.c_void_p()
                    L.call("tpdp_param_create", v.ref, ctypes.byref(ph))
                    handles[id(p)] = ph
                    try:
                        L.call("tpdp_module_add_param", h, pn.encode(), ph)
                    finally:
                        lib.tpdp_param_release(ph)  # the module holds it
                else:
                    L.call("tpdp_module_add_param", h, pn.encode(), ph)
    except BaseException:
        if tree.top is not None:
            lib.tpdp_module_destroy(tree.top)
        raise
    try:
        for fqn, m, parent, name, nu in plan.walk:
            if nu is not None:
                sub = nu._tree
                L.call("tpdp_module_add_child", cmods[id(parent)],
                       name.encode(), sub.top)
                for v in sub.live_units():  # FQNs from the new top
                    v._fqn = fqn + ("." + v._fqn if v._fqn else "")
                tree.merge(sub)
    except BaseException as e:
        # the nested units' C modules are in the new tree now
        tree.broken = "fully_shard failed: %s" % e
        tree.keep = list(plan.params)
        _Orphans.keep(tree)
        raise

    opts = lib.tpdp_fully_shard_options_default()
    opts.zero_level = plan.level
    opts.param_dtype = _C_DTYPES[plan.pdt]
    opts.reduce_dtype = _C_DTYPES[plan.rdt]
    meshes = [mesh]
    if mesh.ndim == 2:  # HSDP: one replica is plain FSDP over the shards
        rep = mesh[mesh.mesh_dim_names[0]]
        shard = mesh[mesh.mesh_dim_names[1]]
        meshes += [rep, shard]
        if rep.size() > 1:
            opts.replicate = rep.comm()
        dp = shard.comm()
    else:
        dp = mesh.comm()
    if plan.device.type == "cuda":
        opts.stream = torch.cuda.current_stream(plan.device).cuda_stream
    cunit = ctypes.c_void_p()
    st = lib.tpdp_fully_shard(tree.top, dp, ctypes.byref(opts),
                              ctypes.byref(cunit))
    error = None
    if st != 0:
        try:
            L.check(st, "tpdp_fully_shard")
        except L.TpdpError as e:
            error = e
    del views  # C viewed the parameters' memory during the call only
    try:
        # A failure on some dp group only reaches every rank.
        agree(L.world(), error, what=_W)
    except L.TpdpError as e:
        tree.broken = "fully_shard failed: %s" % e.message
        tree.keep = list(plan.params)  # what failed ranks' C params view
        if error is not None:
            _Orphans.keep(tree)
            raise
        error = e
    unit = _Unit(plan, tree, tree.top, cunit, meshes)
    tree.units.append(weakref.ref(unit))
    tree.top_unit = weakref.ref(unit)
    _adopt(unit, plan, handles)
    if error is not None:
        raise error
    return module


class _Orphans:
    """C trees of failed fully_shard calls that no unit owns (their nested
    units' modules are inside): destroyed at exit."""
    trees = []

    @classmethod
    def keep(cls, tree):
        cls.trees.append(tree)


def _destroy_orphans():
    for t in _Orphans.trees:
        t.release("the interpreter exited")
    _Orphans.trees = []


L.on_finalize(_destroy_orphans)


def _adopt(unit, plan, handles):
    """The unit's parameters: new Parameters over the shards replace the
    old ones in every registration; the module becomes FSDP<Class>."""
    lib = L.lib
    module = plan.module
    by_handle = {h.value: p for p, h in
                 ((p, handles[id(p)]) for p in plan.params)}
    n = lib.tpdp_fsdp_num_params(unit._cunit)
    unit._params, unit._cparams, unit._fqns = [], [], []
    unit._shard_shapes, unit._shard_ptrs, unit._full_shapes = [], [], []
    unit._rows = []
    unit._pcache, unit._gcache = [None] * n, [None] * n
    unit._stash = [None] * n
    new_of = {}
    for i in range(n):
        name = ctypes.c_char_p()
        h = lib.tpdp_fsdp_param(unit._cunit, i, ctypes.byref(name))
        old = by_handle[h]
        row0, rows = ctypes.c_int64(), ctypes.c_int64()
        L.call("tpdp_fsdp_param_rows", unit._cunit, i, ctypes.byref(row0),
               ctypes.byref(rows))
        t = unit._view(unit._pcache, i, lib.tpdp_param_tensor(h)[0])
        p = nn.Parameter(t, requires_grad=old.requires_grad)
        for k, v in old.__dict__.items():  # e.g. _tpdp_tp (checkpoints)
            p.__dict__.setdefault(k, v)
        p._tpdp_fsdp = (weakref.ref(unit), i)
        unit._params.append(p)
        unit._cparams.append(ctypes.c_void_p(h))
        unit._fqns.append(name.value.decode())
        unit._shard_shapes.append(t.shape)
        unit._shard_ptrs.append(t.data_ptr())
        unit._full_shapes.append(old.shape)
        unit._rows.append((row0.value, rows.value, old.shape[0]))
        new_of[id(old)] = i
    # (over the handles, not the unit: no reference cycle)
    unit._cv = CViews(functools.partial(_grad_shard, unit._cparams), n)
    unit._slots = []
    for d, attr, old, _ in plan.regs:
        i = new_of[id(old)]
        d[attr] = unit._params[i]
        unit._slots.append((d, attr, i))
    for p in unit._params:
        WRAPPED.claim(p, unit)
    for fqn, m, parent, name, nu in plan.walk:
        if nu is None:
            _MIRRORED.claim(m, unit)
    cls = type(module)
    module.__dict__["_tpdp_cls"] = module.__dict__.get("_tpdp_cls",
                                                       cls.__name__)
    module.__class__ = _fsdp_class(cls)
    module.__dict__["_tpdp_fsdp"] = unit
