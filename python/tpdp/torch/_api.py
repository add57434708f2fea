# SPDX-License-Identifier: BSD-3-Clause
"""parallelize_module (torch.distributed.tensor.parallel's api.py): checks
the plan on every rank, agrees over the TP ranks, then applies each style.
A module is parallelized once: its parameters are shards from then on."""
from torch import nn

from .. import _lib as L
from ._agree import agree
from ._functional_collectives import Group
from ._lifetime import WRAPPED, Claims, check_parameters_keep_identity
from ._mesh import check_mesh
from ._style import ParallelStyle

_W = "tpdp.torch.parallelize_module"


class _Styled:
    """What parallelize_module gave a module (held as long as the module
    lives: its parameters stay shards)."""
    closed = False

    def __init__(self, style, mesh, fqn):
        self.style, self.mesh, self.fqn = style, mesh, fqn

    def describe(self):
        return "%r over %r (as %r)" % (self.style, self.mesh, self.fqn)


# Modules a style was applied to.
STYLED = Claims()


def _plan(module, plan, size, rank):
    """[(fqn, style, submodule)] of a checked plan (see parallelize_module).
    Changes nothing."""
    if not isinstance(module, nn.Module):
        raise TypeError("%s: module is a %s, not a torch.nn.Module"
                        % (_W, type(module).__name__))
    check_parameters_keep_identity(_W)
    if isinstance(plan, ParallelStyle):
        plan = {"": plan}
    if not isinstance(plan, dict):
        raise TypeError("%s: parallelize_plan is a %s: a dict of submodule "
                        "names to styles, or one style"
                        % (_W, type(plan).__name__))
    todo, seen = [], {}
    for fqn, style in plan.items():
        if not isinstance(fqn, str):
            raise TypeError("%s: the plan's key %r is a %s, not a submodule "
                            "name (str)" % (_W, fqn, type(fqn).__name__))
        if not isinstance(style, ParallelStyle):
            raise TypeError("%s: the plan's entry %r is a %s, not a parallel "
                            "style" % (_W, fqn, type(style).__name__))
        try:
            mod = module.get_submodule(fqn)
        except AttributeError:
            raise ValueError("%s: the module has no submodule %r"
                             % (_W, fqn)) from None
        if id(mod) in seen:
            raise ValueError("%s: the plan names one module twice: %r and "
                             "%r" % (_W, seen[id(mod)], fqn))
        seen[id(mod)] = fqn
        style._validate(fqn, mod, size, rank)
        for name, sub in mod.named_modules(prefix=fqn):
            held = STYLED.holder(sub)
            if held is not None:
                raise ValueError(
                    "%s: %s was parallelized already (%s): a module is "
                    "parallelized once (its parameters are shards already)"
                    % (_W, "module %r" % name if name else "the module",
                       held.describe()))
        for name, p in mod.named_parameters(prefix=fqn):
            h = WRAPPED.holder(p)
            if h is not None:
                raise ValueError(
                    "%s: parameter %r is held by %s: parallelize the module "
                    "before wrapping it (close() that wrapper first)"
                    % (_W, name, h._lt_name()))
        todo.append((fqn, style, mod))
    return todo


def parallelize_module(module, device_mesh, parallelize_plan):
    """Apply `parallelize_plan` ({submodule name: style}, or one style for
    `module` itself) over the 1-D `device_mesh`. The plan is checked on
    every rank (names, module types, shapes, a module parallelized before
    or held by a DistributedDataParallel) and agreed over the mesh: a plan
    refused on one rank, or differing across ranks, raises on every rank
    before anything changes. Every TP rank must hold the same full
    parameters (same seed). Returns `module`."""
    mesh = check_mesh(device_mesh, _W)
    comm = mesh.host_comm(_W)
    size, rank = L.lib.tpdp_comm_size(comm), L.lib.tpdp_comm_rank(comm)
    error, todo, same = None, [], None
    try:
        todo = _plan(module, parallelize_plan, size, rank)
    except (TypeError, ValueError) as e:
        error = e
    if error is None:
        same = ["%r: %r on a %s with %s" % (
            fqn, style, type(mod).__name__, ", ".join(
                "%s %s" % (n, tuple(p.shape))
                for n, p in mod.named_parameters()))
            for fqn, style, mod in todo]
    agree(comm, error, same, what="%s: the plan" % _W)
    for fqn, style, mod in todo:
        style._apply(mod, Group(mesh, "module %r (%s)"
                                % (fqn, type(style).__name__)))
        STYLED.claim(mod, _Styled(style, mesh, fqn))
    # fully_shard over another dim of the same mesh knows that this one is
    # taken (its misuse check: a dim of the mesh nobody reduces over)
    if todo:
        mesh._root()._tp_dims.update(mesh._dims)
    return module
