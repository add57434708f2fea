# SPDX-License-Identifier: BSD-3-Clause
"""Lifetimes and ownership of the objects that hold C resources: meshes and
their slices, DistributedDataParallel, fully_shard's units (_fully_shard.py)
and whatever wrapper comes next. One mechanism for all of them
(docs/torch.md, "Lifetimes"):

- `Lifetime`, the base class: an object is open from `_lt_start` until
  `close()`, until an object it depends on closes, until it is collected,
  or until exit. Closing closes its dependents first (newest first), then
  frees its own C resources (`_release`). Once closed, every method of its
  own raises TpdpError(TPDP_ERR_STATE) naming it and why it closed
  (`_lt_check_open`). A wrapper also closes when it is collected (a
  dropped wrapper frees its C resources at once: it holds no reference
  cycle); a mesh only at close() or exit.
- `weak_hook`: an autograd hook that reaches its wrapper through a weak
  reference and does nothing once the wrapper is closed or gone. A dropped
  wrapper is not kept alive by its hooks (no reference cycle waits for a
  garbage collection), and no hook of a closed one reaches C. Wrappers
  also remove their hooks when they close.
- `Claims`: who holds a parameter (or which style a module was given).
  Wrapping what a live wrapper holds is refused, naming the holder; a
  closed or collected holder holds nothing.
- `CViews`: torch tensors over memory that C owns (the reducer's buckets)
  are handed out only through it. When C moves that memory (the bucket
  rebuild) or frees it (close), each tensor handed out that is still over
  it is re-pointed (Tensor.set_) at the new memory, or at a copy of its
  own, so no tensor the binding gave out is left over freed memory.
  Tensors a user derives from them (p.grad.view(-1), p.grad[0]) share the
  old memory: they must not outlive the first backward or close().

The other direction, Python memory read by C, needs no bookkeeping here:
the binding hands C a tensor only for the call that reads it
(`_dlpack.View` holds the tensor until the call returns). The reducer
keeps the parameters' data pointers after its creation only to look them
up, never to read them, and is given no gradient buffer (see _ddp.py).
"""
import weakref

import torch

from .. import _lib as L

_live = []  # weak references to every Lifetime started, oldest first
_exit_hooked = []


def _close_all_at_exit():
    for ref in reversed(_live):
        obj = ref()
        if obj is not None:
            try:
                obj._lt_close("the interpreter exited")
            except Exception:  # noqa: BLE001 - exit must go on
                pass
    _live.clear()


def state_error(what, message):
    """TpdpError(TPDP_ERR_STATE) raised by `what` (e.g.
    "tpdp.torch.DistributedDataParallel.forward")."""
    return L.TpdpError("TPDP_ERR_STATE", "%s: %s" % (what, message), what)


def check_parameters_keep_identity(what):
    """Raise ValueError when torch swaps parameters' contents on
    conversion (torch 2.3+'s
    torch.__future__.set_swap_module_params_on_conversion(True)):
    module.to() and load_state_dict then call torch.utils.swap_tensors,
    which refuses the tensors a wrapper holds by weak reference, and moves
    a tensor's __dict__ (TP's record of its sharding) to another object.
    Called by each wrapper's argument checks, before its agreement."""
    get = getattr(getattr(torch, "__future__", None),
                  "get_swap_module_params_on_conversion", None)
    if get is not None and get():
        raise ValueError(
            "%s: torch.__future__.set_swap_module_params_on_conversion(True) "
            "is in effect: tpdp.torch keeps parameters by identity and "
            "records TP's sharding on them, which module.to() and "
            "load_state_dict would swap away; set it back to False" % what)


class Lifetime:
    """Base of the objects holding C resources (see the module's doc).
    A subclass calls `_lt_start(depends_on)` once its C resources exist,
    implements `_release()` (free them; called once) and `_lt_name()`, and
    starts each method of its own with `self._lt_check_open(what)`."""

    _lt_reason = None  # why it closed; None while open (or not started)
    _lt_started = False
    # Close when collected (a wrapper, whose C resources are its own).
    # Meshes say no: freeing communicators at whatever moment each rank's
    # garbage collector runs is not safe; they close at close() or exit.
    _lt_close_when_collected = True

    def _lt_start(self, depends_on=()):
        """Open from now on. Each object of `depends_on` (a Lifetime) must
        be open; closing it closes this one first."""
        for d in depends_on:
            d._lt_check_open("tpdp.torch: %s" % self._lt_name())
        self._lt_reason = None
        self._lt_closing = False
        self._lt_dependents = []
        for d in depends_on:
            d._lt_dependents.append(weakref.ref(self))
        self._lt_started = True
        if not _exit_hooked:
            L.on_finalize(_close_all_at_exit)
            _exit_hooked.append(True)
        if len(_live) > 64 and len(_live) & (len(_live) - 1) == 0:
            _live[:] = [r for r in _live if r() is not None]
        _live.append(weakref.ref(self))

    def _lt_name(self):
        return repr(self)

    @property
    def closed(self):
        """True once closed (by close(), its mesh, collection or exit)."""
        return self._lt_reason is not None

    def _lt_check_open(self, what):
        """Raise TpdpError(TPDP_ERR_STATE) from `what` when closed."""
        if self._lt_reason is not None:
            raise state_error(what, "%s is closed (%s)" % (
                self._lt_name(), self._lt_reason))

    def close(self):
        """Free the C resources (closing what depends on this object
        first). Once closed, the object's own methods raise
        TpdpError(TPDP_ERR_STATE); closing again does nothing. Local:
        call it on every rank, between steps."""
        self._lt_close("close() was called")

    def _lt_close(self, reason):
        if not self._lt_started or self._lt_reason is not None or \
                self._lt_closing:
            return
        self._lt_closing = True
        try:
            deps, self._lt_dependents = self._lt_dependents, []
            for ref in reversed(deps):
                d = ref()
                if d is not None:
                    d._lt_close("%s was closed" % self._lt_name())
            self._release()
        finally:
            self._lt_reason = reason
            self._lt_closing = False

    def _release(self):
        raise NotImplementedError

    def __del__(self):
        if not self._lt_close_when_collected:
            return
        try:
            self._lt_close("it was garbage-collected")
        except Exception:  # noqa: BLE001 - nothing to report to
            pass


def weak_hook(owner, fn, *args):
    """A hook calling fn(owner, *args) while `owner` (a Lifetime) lives and
    is open; the hook's own arguments are ignored. It holds `owner` only
    weakly."""
    ref = weakref.ref(owner)

    def hook(*_):
        o = ref()
        if o is not None and o._lt_reason is None:
            fn(o, *args)
    return hook


class Claims:
    """Objects (parameters, modules) held by a holder: a Lifetime (held
    weakly: it stops holding when closed or collected) or any other object
    (held as long as the object claimed lives). Keyed by identity, never
    by ==: tensors compare element-wise."""

    def __init__(self):
        self._held = {}  # id(obj) -> (weak ref of obj, holder or its ref)

    def holder(self, obj):
        """The live holder of `obj`, else None."""
        e = self._held.get(id(obj))
        if e is None or e[0]() is not obj:
            return None
        h = e[1]() if isinstance(e[1], weakref.ref) else e[1]
        if h is None or getattr(h, "closed", False):
            return None
        return h

    def claim(self, obj, holder):
        key = id(obj)
        held = self._held

        def gone(ref):
            e = held.get(key)
            if e is not None and e[0] is ref:
                del held[key]
        h = weakref.ref(holder) if isinstance(holder, Lifetime) else holder
        held[key] = (weakref.ref(obj, gone), h)

    def release(self, holder):
        """Everything `holder` holds is free again."""
        for key in [k for k, (_, h) in self._held.items()
                    if h is holder or (isinstance(h, weakref.ref) and
                                       h() is holder)]:
            del self._held[key]


# Parameters held by a wrapper (DistributedDataParallel, fully_shard):
# at most one live wrapper per parameter.
WRAPPED = Claims()


class CViews:
    """The torch tensors over C-owned memory that a wrapper hands out, one
    per index (e.g. a parameter's), for memory made by `make(i)` (a fresh
    tensor over index i's C memory). `get(i)` gives index i's tensor (a
    new one when the last was moved off C memory by its user, e.g.
    `p.grad.data = ...`, or resized); `move` re-points it after C moved
    the memory; `release` gives every one still over C memory a copy of
    its own. `tensors[i]` and `ptrs[i]` (the tensor and its data pointer
    when given) are read directly on hot paths: see `is_given`."""

    def __init__(self, make, n):
        self._make = make
        self.tensors = [None] * n
        self.ptrs = [0] * n
        self._shapes = [None] * n

    def _intact(self, i):
        t = self.tensors[i]
        return t is not None and t.data_ptr() == self.ptrs[i] and \
            t.shape == self._shapes[i]

    def get(self, i):
        if self._intact(i):
            return self.tensors[i]
        t = self._make(i)
        self.tensors[i], self.ptrs[i], self._shapes[i] = \
            t, t.data_ptr(), t.shape
        return t

    def is_given(self, i, t):
        """`t` is index i's tensor, as given (over its C memory)."""
        return t is self.tensors[i] and self._intact(i)

    def move(self, i, new):
        """C moved index i's memory to the tensor `new`'s."""
        t = self.tensors[i]
        if t is not None and t.data_ptr() == self.ptrs[i]:
            t.set_(new)
            self.ptrs[i], self._shapes[i] = t.data_ptr(), t.shape

    def release(self):
        """C is about to free the memory: every tensor handed out that is
        still over it gets a copy of its values of its own."""
        for i, t in enumerate(self.tensors):
            if t is not None and t.data_ptr() == self.ptrs[i]:
                t.set_(t.clone())
        self.tensors = [None] * len(self.tensors)
