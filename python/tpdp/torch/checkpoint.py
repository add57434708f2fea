# SPDX-License-Identifier: BSD-3-Clause
"""Sharded checkpoints of tpdp.torch models (the role of
torch.distributed.checkpoint), in the library's format (tpdp/checkpoint.h:
safetensors files and index.json, each tensor as the boxes of its global
tensor that the ranks hold), so that `tpdp ckpt consolidate DIR OUT` makes
one Hugging Face safetensors file of it and it loads on another mesh.

    tpdp.torch.checkpoint.save("ck", model, optimizer)
    tpdp.torch.checkpoint.load("ck", model, optimizer)

`model` is a plain or parallelized module, a DistributedDataParallel
(its inner module's names are saved, without "module."), or a model with
fully_shard units; a checkpoint of any of them loads into any other, on any
number of ranks, at any reshard_after_forward. What each rank holds of a
parameter, and so the box it saves or fills:
  - a parameter parallelize_module sharded: its chunk along the sharded dim
    of the global tensor;
  - a parameter fully_shard sharded: its rows of dim 0 of that (local)
    tensor (this rank's master shard, float32);
  - anything else: the whole tensor (every rank holds the same: saved
    once).
Names: the parameters and the persistent buffers under their FQNs (a
parameter registered twice, e.g. tied weights, once under its first);
per-parameter optimizer state tensors as optim.<key>.<fqn>
(optim.exp_avg.<fqn> and optim.exp_avg_sq.<fqn> for Adam and AdamW, as
examples/train_gpt2 writes them); the scalar state (AdamW's step) and the
param groups' hyperparameters in the metadata ("optim", and "step" as
train_gpt2 writes it when every parameter has the same step), with
"consolidate_exclude" leaving optim.* out of a consolidated file.
"""
import ctypes
import json
import numbers

import torch
from torch import nn

from .. import _lib as L
from ._agree import agree
from ._ddp import DistributedDataParallel
from ._dlpack import View

_W = "tpdp.torch.checkpoint"
OPTIM_PREFIX = "optim."
# metadata keys this module writes (a caller's may not take them)
_RESERVED = ("step", "optim", "consolidate_exclude", "consolidate_shapes")


def _module_of(model, what):
    if isinstance(model, DistributedDataParallel):
        model._lt_check_open("%s.%s" % (_W, what))
        return model.module
    if not isinstance(model, nn.Module):
        raise TypeError("%s.%s: model is a %s, not a torch.nn.Module"
                        % (_W, what, type(model).__name__))
    return model


def _persistent_buffers(module):
    out, seen = [], set()
    for mname, m in module.named_modules():
        skip = getattr(m, "_non_persistent_buffers_set", set())
        for bname, b in m._buffers.items():
            if b is None or bname in skip or id(b) in seen:
                continue
            seen.add(id(b))
            out.append(("%s.%s" % (mname, bname) if mname else bname, b))
    return out


def _box(p, fqn, what, loading):
    """(this rank's tensor of parameter p, the global shape, the offset of
    the tensor in it)."""
    fs = p.__dict__.get("_tpdp_fsdp")
    if fs is not None:
        unit, i = fs[0](), fs[1]
        if unit is None or unit.closed:
            raise L.TpdpError("TPDP_ERR_STATE", "%s.%s: parameter %r: its "
                              "fully_shard unit is closed (%s)" % (
                                  _W, what, fqn, unit._lt_reason if unit
                                  else "collected"))
        row0, rows, total = unit._rows[i]
        full = unit._full_shapes[i]
        if p.data_ptr() == unit._shard_ptrs[i] and \
                p.shape == unit._shard_shapes[i]:
            local = p.data
        elif not loading and p.dtype == torch.float32 and \
                p.shape == full:  # gathered in f32: its rows are the shard
            local = p.data[row0:row0 + rows]
        else:
            raise L.TpdpError(
                "TPDP_ERR_STATE", "%s.%s: parameter %r of %s: the unit is "
                "in state %s (a forward ran since the last step); %s between "
                "steps" % (_W, what, fqn, unit._lt_name(), unit._state,
                           "load" if loading else "save mixed-precision "
                           "units"))
        shape = list(full)
        offset = [0] * len(shape)
        offset[0] = row0
    else:
        local = p.data
        shape = list(p.shape)
        offset = [0] * len(shape)
    tp = p.__dict__.get("_tpdp_tp")
    if tp is not None:
        shape[tp.dim] = tp.size
        offset[tp.dim] += tp.lo
    return local, shape, offset


class _Entries:
    """A tpdp_state_dict being filled, with the views that must live as
    long as it is used."""

    def __init__(self):
        self.sd = ctypes.c_void_p()
        L.call("tpdp_state_dict_create", ctypes.byref(self.sd))
        self.views = []
        self.names = []

    def add(self, name, local, shape, offset):
        v = View(local, "the tensor %r" % name)
        self.views.append(v)
        n = local.dim()
        L.call("tpdp_state_dict_add_box", self.sd, name.encode(), v.ref,
               (ctypes.c_int64 * max(n, 1))(*shape),
               (ctypes.c_int64 * max(n, 1))(*offset))
        self.names.append(name)

    def meta(self, key, value):
        L.call("tpdp_state_dict_set_meta", self.sd, key.encode(),
               value.encode())

    def close(self):
        sd, self.sd = self.sd, None
        if sd:
            L.lib.tpdp_state_dict_destroy(sd)
        self.views = []


def _params(module):
    """[(fqn, parameter)], each parameter once (its first name)."""
    return list(module.named_parameters())


def _optim_params(optimizer, names, what):
    """The optimizer's parameters that the model has: [(fqn, p, group
    index)], in the model's order."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("%s.%s: optimizer is a %s, not a torch.optim."
                        "Optimizer" % (_W, what, type(optimizer).__name__))
    group_of = {}
    for gi, g in enumerate(optimizer.param_groups):
        for p in g["params"]:
            group_of[id(p)] = gi
    out = [(n, p, group_of[id(p)]) for n, p in names if id(p) in group_of]
    if len(out) != len(group_of):
        raise ValueError("%s.%s: the optimizer holds %d parameters the model "
                         "does not have (an optimizer built before "
                         "fully_shard, or of another model)"
                         % (_W, what, len(group_of) - len(out)))
    return out


def _jsonable(v):
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        return v.item()
    if isinstance(v, (bool, numbers.Number, str)) or v is None:
        return v
    if isinstance(v, (tuple, list)) and all(
            isinstance(x, (bool, numbers.Number)) for x in v):
        return list(v)
    return _SKIP


_SKIP = object()


def _comm(no_dist):
    return None if no_dist else L.world()


def save(checkpoint_dir, model, optimizer=None, *, metadata=None,
         no_dist=False):
    """Save `model`'s parameters and persistent buffers (and `optimizer`'s
    state) into `checkpoint_dir`, each rank writing what it holds (see the
    module's doc); `metadata`: str -> str kept in the index. Collective over
    all ranks (no_dist=True: this process alone); every rank passes the
    same model structure; errors are raised on every rank alike. Atomic:
    a save that fails leaves the directory's previous checkpoint whole."""
    error, ent = None, None
    try:
        ent = _build(model, optimizer, "save", loading=False)
        if metadata is not None:
            if not isinstance(metadata, dict) or not all(
                    isinstance(k, str) and isinstance(v, str)
                    for k, v in metadata.items()):
                raise TypeError("%s.save: metadata must map str to str"
                                % _W)
            for k in metadata:
                if k in _RESERVED:
                    raise ValueError("%s.save: metadata key %r is the "
                                     "checkpoint's own" % (_W, k))
            for k, v in metadata.items():
                ent.meta(k, v)
        if not isinstance(checkpoint_dir, str):
            raise TypeError("%s.save: checkpoint_dir is a %s: a path (str)"
                            % (_W, type(checkpoint_dir).__name__))
    except (TypeError, ValueError, L.TpdpError) as e:
        error = e
    _run("save", ent, error, checkpoint_dir, no_dist)


def _run(what, ent, error, checkpoint_dir, no_dist):
    """tpdp_checkpoint_<what> of the entries `ent` once every rank built
    them: `error`, one rank's mistake, is raised on every rank first (the
    same entries on every rank are checked there too). Frees `ent`."""
    try:
        if not no_dist:
            agree(L.world(), error, ent.names if ent else None,
                  what="%s.%s: the tensors" % (_W, what))
        elif error is not None:
            raise error
        L.call("tpdp_checkpoint_" + what, ent.sd, checkpoint_dir.encode(),
               _comm(no_dist), None)
    finally:
        if ent is not None:
            ent.close()


def _build(model, optimizer, what, loading, ckpt_names=None):
    """The state dict of `model` (and `optimizer`): for a save, its tensors
    and metadata; for a load, the tensors to fill (optimizer state made
    where the checkpoint has some and the optimizer has none yet)."""
    module = _module_of(model, what)
    ent = _Entries()
    try:
        named = _params(module)
        boxes = {}
        for fqn, p in named:
            boxes[id(p)] = _box(p, fqn, what, loading)
            ent.add(fqn, *boxes[id(p)])
        for fqn, b in _persistent_buffers(module):
            ent.add(fqn, b, list(b.shape), [0] * b.dim())
        if optimizer is not None:
            _optim_entries(ent, optimizer, named, boxes, what, loading,
                           ckpt_names)
        if not loading:
            ent.meta("consolidate_exclude", json.dumps([OPTIM_PREFIX]))
    except BaseException:
        ent.close()
        raise
    return ent


def _optim_entries(ent, optimizer, named, boxes, what, loading, ckpt_names):
    params = _optim_params(optimizer, named, what)
    if loading:
        keys = sorted({n[len(OPTIM_PREFIX):].split(".", 1)[0]
                       for n in ckpt_names if n.startswith(OPTIM_PREFIX)})
    scalars, steps = {}, set()
    for fqn, p, _ in params:
        local, shape, offset = boxes[id(p)]
        st = optimizer.state[p] if loading else optimizer.state.get(p, {})
        if loading:
            for k in keys:
                name = "%s%s.%s" % (OPTIM_PREFIX, k, fqn)
                if name not in ckpt_names:
                    continue
                v = st.get(k)
                if not isinstance(v, torch.Tensor) or v.shape != local.shape:
                    st[k] = v = torch.zeros_like(local,
                                                 memory_format=torch.
                                                 contiguous_format)
                ent.add(name, v, shape, offset)
            continue
        for k in sorted(st):
            v = st[k]
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                if v.shape != local.shape:
                    raise ValueError(
                        "%s.save: optimizer state %r of parameter %r has "
                        "shape %s, the parameter %s" % (
                            _W, k, fqn, tuple(v.shape), tuple(local.shape)))
                ent.add("%s%s.%s" % (OPTIM_PREFIX, k, fqn), v, shape, offset)
            else:
                j = _jsonable(v)
                if j is not _SKIP:
                    scalars.setdefault(k, {})[fqn] = j
                    if k == "step":
                        steps.add(j)
    if loading:
        return
    groups = []
    for gi, g in enumerate(optimizer.param_groups):
        h = {k: _jsonable(v) for k, v in g.items() if k != "params"}
        h = {k: v for k, v in h.items() if v is not _SKIP}
        h["params"] = [fqn for fqn, _, i in params if i == gi]
        groups.append(h)
    # a scalar every parameter has alike once, else per parameter
    for k, per in scalars.items():
        vals = list(per.values())
        if len(per) == len(params) and all(v == vals[0] for v in vals):
            scalars[k] = vals[0]
    ent.meta("optim", json.dumps({"class": type(optimizer).__name__,
                                  "param_groups": groups,
                                  "state": scalars}, sort_keys=True))
    if len(steps) == 1:
        ent.meta("step", "%d" % int(next(iter(steps))))


def _read_index(checkpoint_dir, no_dist):
    """(tensor names, metadata) of the checkpoint (collective)."""
    ck = ctypes.c_void_p()
    L.call("tpdp_checkpoint_open", checkpoint_dir.encode(), _comm(no_dist),
           ctypes.byref(ck))
    try:
        names = set()
        info = L.CheckpointTensorInfo()
        for i in range(L.lib.tpdp_checkpoint_num_tensors(ck)):
            L.call("tpdp_checkpoint_tensor_at", ck, i, ctypes.byref(info))
            names.add(info.name.decode())
        meta = {}
        for k in ("optim", "step"):
            v = L.lib.tpdp_checkpoint_meta(ck, k.encode())
            if v is not None:
                meta[k] = v.decode()
        return names, meta
    finally:
        L.lib.tpdp_checkpoint_close(ck)


def load(checkpoint_dir, model, optimizer=None, *, no_dist=False):
    """Fill `model`'s parameters and persistent buffers (and `optimizer`'s
    state, made where it has none yet, and its param groups'
    hyperparameters) from the checkpoint in `checkpoint_dir`, whatever mesh,
    wrapper and number of ranks saved it. Collective over all ranks
    (no_dist=True: this process alone). Between steps: a model with
    fully_shard units loads into their shards. Errors (a tensor missing,
    another global shape, a corrupt file) are raised on every rank alike."""
    if not isinstance(checkpoint_dir, str):
        raise TypeError("%s.load: checkpoint_dir is a %s: a path (str)"
                        % (_W, type(checkpoint_dir).__name__))
    names, meta = _read_index(checkpoint_dir, no_dist)
    error, ent = None, None
    try:
        ent = _build(model, optimizer, "load", loading=True,
                     ckpt_names=names)
    except (TypeError, ValueError, L.TpdpError) as e:
        error = e
    _run("load", ent, error, checkpoint_dir, no_dist)
    if optimizer is not None and "optim" in meta:
        _load_optim_meta(optimizer, model, json.loads(meta["optim"]))


# Parameter-group entries that say how the loading optimizer runs, not
# what it learnt: kept as the loading side set them (a checkpoint saved on
# a GPU with fused=True or capturable=True loads into a CPU optimizer),
# and the group's own parameter names (torch 2.6+).
_GROUP_KEYS_KEPT = frozenset(("params", "param_names", "foreach", "fused",
                              "capturable", "differentiable"))


def _load_optim_meta(optimizer, model, saved):
    named = _params(_module_of(model, "load"))
    params = _optim_params(optimizer, named, "load")
    for k, per in saved.get("state", {}).items():
        for fqn, p, gi in params:
            if isinstance(per, dict) and fqn not in per:
                continue
            st = optimizer.state[p]
            v = per[fqn] if isinstance(per, dict) else per
            old = st.get(k)
            if isinstance(old, torch.Tensor):
                old.fill_(v)
            elif k == "step":
                # torch's Adam/AdamW keep a float32 tensor: on the CPU, or
                # on the parameter's device when fused or capturable (as
                # torch's own Optimizer.load_state_dict places it)
                g = optimizer.param_groups[gi]
                dev = p.device if g.get("fused") or g.get("capturable") \
                    else "cpu"
                st[k] = torch.tensor(float(v), dtype=torch.float32,
                                     device=dev)
            else:
                st[k] = v
    groups = saved.get("param_groups", [])
    if len(groups) == len(optimizer.param_groups):
        for g, h in zip(optimizer.param_groups, groups):
            for k, v in h.items():
                if k not in _GROUP_KEYS_KEPT and k in g:
                    g[k] = tuple(v) if isinstance(g[k], tuple) else v
