# SPDX-License-Identifier: BSD-3-Clause
"""The misuse catalogue of tpdp.torch (as tests/misuse/ is for the C API):
mistakes a PyTorch user makes, each refused with the exception type and the
words asserted here, on every rank (also when one rank alone errs: rank
ODD), and the process training correctly afterwards: `assert_trains` runs
SGD steps through a DistributedDataParallel and compares the parameters
with the module trained alone on every rank's batch at once.

Cases (issue 34 first):
  lifetimes
  - a mesh used, then closed: all_reduce, its slices, its methods
  - a DistributedDataParallel used after close(): every method; its
    gradients kept in memory of their own; the module trains alone and is
    wrapped again; close() twice
  - closing the mesh closes the wrappers over it; a backward of a graph
    made before stays local (no hook reaches C)
  - a wrapper dropped without close(): collected at once (no cycle), its
    parameters free for a new wrapper
  - a parallelized module run after its mesh was closed
  memory
  - gradients swapped under the reducer in copy mode (p.grad.data = zeros,
    as issue 34 found: heap corruption) and in view mode, on every rank
  - one rank alone swapping p.grad.data; p.grad assigned a new tensor;
    p.grad.data of another dtype (adopted)
  - p.grad.data of another shape (one rank), p.grad.resize_() smaller in
    view mode and larger in copy mode: refused on every rank
  steps
  - one rank's extra backward (kept local, as torch's DDP)
  - one rank's missing backward: caught at the next step on every rank
  - one rank's extra forward under grad: caught on every rank
  - a backward of a forward run on the inner module: local
  wrapping
  - re-wrapping after replacing a parameter (refused while the old wrapper
    lives, naming it; fine after close())
  - a replaced parameter on one rank only; a replaced buffer
  - rank 0's state: a frozen integer parameter, a non-contiguous buffer, a
    bool buffer, a float16 frozen parameter, buffers again before forward
  - DDP(DDP(m)); DDP of a submodule of a wrapped module
  - an option that differs on one rank; a module that differs on one rank;
    a bad comm_hook on one rank only
  - argument types and values: bucket_cap_mb, flags, device_mesh (not a
    mesh, 2-D, closed)
  tensor parallelism
  - parallelize_module twice (issue 34: shards of shards); on a submodule
    of a parallelized module; on a module a wrapper holds
  - a plan that differs on one rank; an unknown submodule on one rank
    only; one module twice in a plan; plans of the wrong types
  - style arguments of the wrong type; an output layout the style lacks;
    a vocabulary that leaves one rank no rows
  init_device_mesh and all_reduce
  - "cuda" where torch has no GPU; no shape (issue 34); shapes, names and
    device types refused, on one rank only too
  - all_reduce's op, tensor, dtype, layout and mesh
"""
import gc
import os
import re
import weakref

os.environ.setdefault("TPDP_TIMEOUT_S", "120")  # a hang fails, not waits

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import tpdp.torch as tt  # noqa: E402
from conftest import rel_err  # noqa: E402

RANK, SIZE = tt.rank(), tt.world_size()
ODD = SIZE - 1  # the rank that errs alone
TOL = 1e-5
SP = "(rank %d of %d)" % (ODD, SIZE)


def words(*parts):
    """A regex matching the parts in order (each taken literally)."""
    return ".*".join(re.escape(p) for p in parts)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def make(seed=1):
    torch.manual_seed(seed)
    return Net()


def data(step, rank):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g)


def loss_of(model, step, rank=RANK):
    x, y = data(step, rank)
    return nn.functional.mse_loss(model(x), y)


def global_ref(module):
    """A copy of `module`'s current values, unwrapped."""
    ref = make()
    ref.load_state_dict(module.state_dict())
    return ref


def ref_loss(ref, step):
    """The loss over every rank's batch at once (the mean of the ranks'
    means: the batches are the same size)."""
    xs, ys = zip(*[data(step, r) for r in range(SIZE)])
    return nn.functional.mse_loss(ref(torch.cat(xs)), torch.cat(ys))


def assert_close(model, ref, what):
    for (n, a), (_, b) in zip(model.named_parameters(),
                              ref.named_parameters()):
        assert rel_err(a, b) <= TOL, "%s: %s differs" % (what, n)


def assert_trains(ddp, steps=2, zero=None):
    """`ddp` trains like its module alone on every rank's batch: `steps`
    SGD steps from the current values. `zero(params)` clears the gradients
    after each step (default: zero_grad())."""
    ref = global_ref(ddp.module)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    ddp.module.zero_grad()
    for s in range(steps):
        loss_of(ddp, 900 + s).backward()
        opt.step()
        (zero or (lambda ps: opt.zero_grad()))(list(ddp.parameters()))
        ref_loss(ref, 900 + s).backward()
        ropt.step()
        ropt.zero_grad()
    assert_close(ddp.module, ref, "after %d steps" % steps)


def fresh_trains():
    """A new wrapper over a new module trains (nothing left stuck)."""
    ddp = tt.DistributedDataParallel(make())
    assert_trains(ddp)
    ddp.close()


def world_mesh(name="dp"):
    return tt.init_device_mesh("cpu", (SIZE,), mesh_dim_names=(name,))


# ------------------------------------------------------------- lifetimes

def test_mesh_used_then_closed():
    mesh = tt.init_device_mesh("cpu", (SIZE, 1), mesh_dim_names=("dp", "tp"))
    dp = mesh["dp"]
    t = torch.ones(3)
    tt.all_reduce(t, dp)
    assert t.tolist() == [SIZE] * 3
    mesh.close()
    assert mesh.closed and dp.closed
    name = "DeviceMesh('cpu', (%d, 1), mesh_dim_names=('dp', 'tp'))" % SIZE
    # issue 34: a segfault in tpdp_allreduce (the freed communicator)
    with pytest.raises(tt.TpdpError, match=words(
            "tpdp.torch.all_reduce", "slice 'dp' of " + name,
            "is closed (" + name + " was closed)")) as e:
        tt.all_reduce(t, dp)
    assert e.value.status == "TPDP_ERR_STATE"
    for call in (lambda: mesh["tp"], mesh.size, mesh.get_rank):
        with pytest.raises(tt.TpdpError, match=words(
                name, "is closed (close() was called)")):
            call()
    for call in (dp.get_local_rank, dp.comm, dp.size):
        with pytest.raises(tt.TpdpError, match=words(
                "slice 'dp' of " + name, "is closed (" + name +
                " was closed)")):
            call()
    assert t.tolist() == [SIZE] * 3
    mesh.close()  # again: nothing
    fresh_trains()


def test_ddp_used_after_close():
    model = make()
    ddp = tt.DistributedDataParallel(model)
    loss_of(ddp, 0).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    ddp.close()
    ddp.close()  # again: nothing
    assert ddp.closed
    # issue 34: forward raised nothing and gradients stayed unaveraged
    for call in (lambda: ddp(data(1, RANK)[0]), ddp.bucket_indices,
                 ddp.unused_parameters, ddp.stats, ddp.no_sync):
        with pytest.raises(tt.TpdpError, match=words(
                "DistributedDataParallel #", "of a Net", "is closed "
                "(close() was called)")) as e:
            call()
        assert e.value.status == "TPDP_ERR_STATE"
    # the averaged gradients stay, in memory of their own
    for p, g in zip(model.parameters(), grads):
        assert torch.equal(p.grad, g)
    # the module trains alone (hooks gone: nothing reaches C) ...
    before = [p.grad.clone() for p in model.parameters()]
    loss_of(model, 1).backward()
    local = global_ref(model)
    nn.functional.mse_loss(local(data(1, RANK)[0]), data(1, RANK)[1]) \
        .backward()
    for p, b, q in zip(model.parameters(), before, local.parameters()):
        assert rel_err(p.grad - b, q.grad) <= TOL
    # ... and is wrapped again
    again = tt.DistributedDataParallel(model)
    assert_trains(again)
    again.close()


def test_closing_the_mesh_closes_its_wrappers():
    mesh = world_mesh()
    model = make()
    ddp = tt.DistributedDataParallel(model, device_mesh=mesh["dp"])
    loss = loss_of(ddp, 0)
    mesh.close()
    assert ddp.closed
    name = "DeviceMesh('cpu', (%d,), mesh_dim_names=('dp',))" % SIZE
    with pytest.raises(tt.TpdpError, match=words(
            "DistributedDataParallel #", "is closed (" + name +
            " was closed)")):
        ddp(data(0, RANK)[0])
    # the backward of a graph made before: local, no hook reaches C
    loss.backward()
    ref = make()
    loss_of(ref, 0).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert rel_err(p.grad, q.grad) <= TOL
    with pytest.raises(tt.TpdpError, match=words("is closed")):
        tt.DistributedDataParallel(make(), device_mesh=mesh)
    fresh_trains()


def test_dropped_wrapper_is_collected_at_once():
    model = make()
    gc.disable()
    try:
        ddp = tt.DistributedDataParallel(model)
        loss_of(ddp, 0).backward()
        ref = weakref.ref(ddp)
        del ddp
        assert ref() is None  # no reference cycle keeps it
        again = tt.DistributedDataParallel(model)
    finally:
        gc.enable()
    assert_trains(again)
    again.close()


def test_parallelized_module_after_its_mesh_closed():
    mesh = world_mesh("tp")
    m = tt.parallelize_module(make(), mesh["tp"],
                              {"fc1": tt.ColwiseParallel(),
                               "fc2": tt.RowwiseParallel()})
    m(data(0, 0)[0])
    mesh.close()
    with pytest.raises(tt.TpdpError, match=words(
            "the forward of module 'fc1' (ColwiseParallel)",
            "DeviceMesh('cpu', (%d,), mesh_dim_names=('tp',))" % SIZE,
            "is closed")) as e:
        m(data(0, 0)[0])
    assert e.value.status == "TPDP_ERR_STATE"
    fresh_trains()


# ---------------------------------------------------------------- memory

@pytest.mark.parametrize("view", [False, True])
def test_gradient_storage_swapped_under_the_reducer(view):
    # issue 34 (copy mode): "double free or corruption" after a few steps.
    # Swapping in zeros is zero_grad(): the training must be torch's.
    ddp = tt.DistributedDataParallel(make(), gradient_as_bucket_view=view,
                                     bucket_cap_mb=0.0001)

    def swap(params):
        for p in params:
            p.grad.data = torch.zeros_like(p)
    assert_trains(ddp, steps=4, zero=swap)
    assert_trains(ddp, steps=2)
    ddp.close()


@pytest.mark.parametrize("view", [False, True])
def test_gradient_replaced_on_one_rank_is_adopted(view):
    ddp = tt.DistributedDataParallel(make(), gradient_as_bucket_view=view)

    def odd_swaps(params):
        for k, p in enumerate(params):
            if RANK != ODD:
                p.grad.zero_()
            elif k % 3 == 0:
                p.grad.data = torch.zeros_like(p)
            elif k % 3 == 1:
                p.grad = torch.zeros_like(p)
            else:  # another dtype: adopted (cast into the bucket)
                p.grad.data = torch.zeros(p.shape, dtype=torch.float64)
    assert_trains(ddp, steps=3, zero=odd_swaps)
    loss_of(ddp, 7).backward()
    for i, p in enumerate(ddp.parameters()):
        if view:  # bound to the bucket again
            assert ddp._cv.is_given(i, p.grad)
        else:  # the user's tensor, averaged values cast into it
            assert p.grad.dtype == (torch.float64 if RANK == ODD and
                                    i % 3 == 2 else p.dtype)
    ddp.close()


@pytest.mark.parametrize("how", ["data", "resize"])
@pytest.mark.parametrize("view", [False, True])
def test_gradient_of_another_shape_is_refused(view, how):
    model = make()
    ddp = tt.DistributedDataParallel(model, gradient_as_bucket_view=view)
    loss_of(ddp, 0).backward()
    if RANK == ODD:
        if how == "data":
            model.fc2.weight.grad.data = torch.zeros(2, 2)
        elif view:  # a view of the bucket can only shrink
            model.fc2.weight.grad.resize_(5)
        else:
            model.fc2.weight.grad.resize_(100)
    with pytest.raises(ValueError, match=words(
            "the gradient of parameter 'fc2.weight' has another shape than "
            "the parameter (3, 8) (rank %d)" % ODD, "set p.grad = None")):
        ddp(data(1, RANK)[0])
    model.fc2.weight.grad = None
    assert_trains(ddp)
    ddp.close()


# ----------------------------------------------------------------- steps

def test_one_ranks_extra_backward_stays_local():
    # issue 34: wrong gradients on that rank, then a hang
    model = make()
    ddp = tt.DistributedDataParallel(model)
    ref = global_ref(model)
    loss = loss_of(ddp, 0)
    loss.backward(retain_graph=True)
    if RANK == ODD:
        loss.backward()  # no forward armed it: local, as torch's DDP
    ref_loss(ref, 0).backward()
    local = global_ref(model)
    loss_of(local, 0).backward()
    for p, q, l in zip(model.parameters(), ref.parameters(),
                       local.parameters()):
        want = q.grad + (l.grad if RANK == ODD else 0)
        assert rel_err(p.grad, want) <= TOL
    assert_trains(ddp)
    ddp.close()


# Rank ODD ran forward 3 while the others ran the backward of forward 2.
OUT_OF_STEP = words("the ranks are out of step", "rank 0 in the backward of "
                    "its forward 2", "rank %d in its forward 3" % ODD)


def test_one_ranks_missing_backward_is_caught_on_every_rank():
    ddp = tt.DistributedDataParallel(make())
    loss_of(ddp, 0).backward()
    loss = loss_of(ddp, 1)
    if RANK == ODD:  # forward 2 without its backward
        def step():
            loss_of(ddp, 2)
    else:
        step = loss.backward
    with pytest.raises(tt.TpdpError, match=OUT_OF_STEP) as e:
        step()
    assert e.value.status == "TPDP_ERR_STATE"
    del loss
    assert_trains(ddp)
    ddp.close()


def test_one_ranks_extra_forward_is_caught_on_every_rank():
    ddp = tt.DistributedDataParallel(make())
    loss_of(ddp, 0).backward()
    if RANK == ODD:
        loss_of(ddp, 1)  # under grad, never backward: an extra forward
    loss = None
    with pytest.raises(tt.TpdpError, match=OUT_OF_STEP):
        loss = loss_of(ddp, 2)
        loss.backward()
    del loss
    assert_trains(ddp)
    ddp.close()


def test_backward_of_the_inner_module_stays_local():
    model = make()
    ddp = tt.DistributedDataParallel(model)
    loss_of(ddp.module, 0).backward()  # not through the wrapper
    local = make()
    loss_of(local, 0).backward()
    for p, q in zip(model.parameters(), local.parameters()):
        assert rel_err(p.grad, q.grad) <= TOL
    assert_trains(ddp)
    ddp.close()


# -------------------------------------------------------------- wrapping

def test_rewrapping_after_replacing_a_parameter():
    # issue 34: the old wrapper's hooks fired into the new one
    model = make()
    ddp = tt.DistributedDataParallel(model)
    loss_of(ddp, 0).backward()
    model.fc2.weight = nn.Parameter(model.fc2.weight.detach().clone())
    with pytest.raises(ValueError, match=words(
            "parameter 'fc2.weight' was replaced after wrapping (rank 0)",
            "close() this wrapper and wrap the module again")):
        ddp(data(1, RANK)[0])
    with pytest.raises(ValueError, match=words(
            "module: its parameter 'fc1.weight' is held by "
            "DistributedDataParallel #", "close() that wrapper",
            "(rank 0 of %d)" % SIZE)):
        tt.DistributedDataParallel(model)
    ddp.close()
    again = tt.DistributedDataParallel(model)
    assert_trains(again)
    again.close()


def test_parameter_replaced_on_one_rank():
    model = make()
    ddp = tt.DistributedDataParallel(model)
    if RANK == ODD:
        model.fc1.bias = nn.Parameter(model.fc1.bias.detach().clone())
    with pytest.raises(ValueError, match=words(
            "parameter 'fc1.bias' was replaced after wrapping (rank %d)"
            % ODD)):
        ddp(data(0, RANK)[0])
    ddp.close()
    again = tt.DistributedDataParallel(model)
    assert_trains(again)
    again.close()


class NormNet(Net):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(8)

    def forward(self, x):
        return self.fc2(torch.tanh(self.bn(self.fc1(x))))


def test_buffer_replaced():
    torch.manual_seed(1)
    model = NormNet()
    ddp = tt.DistributedDataParallel(model)
    model.bn.running_mean = torch.zeros(8)
    with pytest.raises(ValueError, match=words(
            "buffer 'bn.running_mean' was replaced after wrapping (rank 0)",
            "update the buffer in place")):
        ddp(data(0, RANK)[0])
    ddp.close()
    fresh_trains()


class StateNet(Net):
    """Parameters without grad and buffers of several dtypes and layouts,
    each rank's own values."""

    def __init__(self):
        super().__init__()
        self.steps = nn.Parameter(torch.tensor([7 * RANK + 1]),
                                  requires_grad=False)
        self.scale16 = nn.Parameter(torch.full((2, 3), float(RANK),
                                            dtype=torch.float16),
                                 requires_grad=False)
        self.register_buffer("nc", (torch.arange(12.) + RANK)
                             .reshape(3, 4).t())
        self.register_buffer("mask", torch.tensor([RANK == 0, RANK != 0]))


def test_rank0_state_everywhere():
    # issue 34: a frozen integer parameter and a non-contiguous buffer kept
    # each rank's values
    torch.manual_seed(1)
    model = StateNet()
    assert not model.nc.is_contiguous()
    ddp = tt.DistributedDataParallel(model)
    assert model.steps.tolist() == [1]
    assert torch.equal(model.scale16, torch.zeros(2, 3, dtype=torch.float16))
    assert torch.equal(model.nc, torch.arange(12.).reshape(3, 4).t())
    assert not model.nc.is_contiguous()  # the same tensor, filled in
    assert model.mask.tolist() == [True, False]
    # buffers again before each forward (broadcast_buffers=True)
    if RANK == ODD:
        model.nc.add_(5)
    ddp(data(0, RANK)[0])
    assert torch.equal(model.nc, torch.arange(12.).reshape(3, 4).t())
    ddp.close()
    fresh_trains()


def test_wrapping_a_wrapper_or_part_of_a_wrapped_module():
    model = make()
    ddp = tt.DistributedDataParallel(model)
    with pytest.raises(ValueError, match=words(
            "module is already a DistributedDataParallel #", "wrap the inner "
            "module once")):
        tt.DistributedDataParallel(ddp)
    with pytest.raises(ValueError, match=words(
            "its parameter 'weight' is held by DistributedDataParallel #",
            "of a Net")):
        tt.DistributedDataParallel(model.fc1)
    assert_trains(ddp)
    ddp.close()


def test_options_or_module_differing_on_one_rank():
    with pytest.raises(ValueError, match=words(
            "the module or an option differs across ranks: rank 0 has "
            "option bucket_cap_mb=25.0, rank %d has option "
            "bucket_cap_mb=10.0" % ODD)):
        tt.DistributedDataParallel(make(), bucket_cap_mb=10 if RANK == ODD
                                   else 25)
    model = make()
    if RANK == ODD:
        model.register_buffer("extra", torch.zeros(2))
    with pytest.raises(ValueError, match=words(
            "differs across ranks", "rank %d has buffer 'extra'" % ODD)):
        tt.DistributedDataParallel(model)
    with pytest.raises(ValueError, match=words(
            "comm_hook 'int8': use None, 'bf16' or 'fp16'", SP)):
        tt.DistributedDataParallel(make(), comm_hook="int8" if RANK == ODD
                                   else None)
    fresh_trains()


def test_ddp_argument_types_and_values():
    cases = [
        (TypeError, "bucket_cap_mb is a str: a number of MiB",
         dict(bucket_cap_mb="25")),
        (ValueError, "bucket_cap_mb 0 must be > 0", dict(bucket_cap_mb=0)),
        (TypeError, "find_unused_parameters is a str: True or False",
         dict(find_unused_parameters="no")),
        (TypeError, "gradient_as_bucket_view is a NoneType",
         dict(gradient_as_bucket_view=None)),
        (TypeError, "device_mesh is a str, not a tpdp.torch.DeviceMesh",
         dict(device_mesh="dp")),
    ]
    for cls, text, kw in cases:
        with pytest.raises(cls, match=words(
                "tpdp.torch.DistributedDataParallel: " + text)):
            tt.DistributedDataParallel(make(), **kw)
    mesh = tt.init_device_mesh("cpu", (SIZE, 1), mesh_dim_names=("dp", "tp"))
    with pytest.raises(ValueError, match=words(
            "device_mesh must be 1-D, e.g. mesh['tp']")):
        tt.DistributedDataParallel(make(), device_mesh=mesh)
    mesh.close()
    with pytest.raises(tt.TpdpError, match=words("(device_mesh)",
                                                 "is closed")):
        tt.DistributedDataParallel(make(), device_mesh=mesh)
    fresh_trains()


# ------------------------------------------------------ tensor parallelism

def tp_plan():
    return {"fc1": tt.ColwiseParallel(), "fc2": tt.RowwiseParallel()}


def assert_tp_output(m):
    x = data(5, 0)[0]
    assert rel_err(m(x), make()(x)) <= TOL


def test_parallelize_module_twice():
    # issue 34: fc1.weight (8, 6) ended as shards of its shards
    mesh = world_mesh("tp")
    m = tt.parallelize_module(make(), mesh["tp"], tp_plan())
    shape = tuple(m.fc1.weight.shape)
    with pytest.raises(ValueError, match=words(
            "module 'fc1' was parallelized already (ColwiseParallel(",
            "over DeviceMesh('cpu', (%d,)" % SIZE,
            "a module is parallelized once")):
        tt.parallelize_module(m, mesh["tp"], tp_plan())
    with pytest.raises(ValueError, match=words(
            "the module was parallelized already (ColwiseParallel(")):
        tt.parallelize_module(m.fc1, mesh["tp"], tt.ColwiseParallel())
    assert tuple(m.fc1.weight.shape) == shape
    assert_tp_output(m)
    mesh.close()


def test_parallelize_a_wrapped_module():
    model = make()
    ddp = tt.DistributedDataParallel(model)
    mesh = world_mesh("tp")
    with pytest.raises(ValueError, match=words(
            "parameter 'fc1.weight' is held by DistributedDataParallel #",
            "parallelize the module before wrapping it")):
        tt.parallelize_module(model, mesh["tp"], tp_plan())
    assert tuple(model.fc1.weight.shape) == (8, 6)
    assert_trains(ddp)
    ddp.close()
    mesh.close()


def test_plan_refused_or_differing_on_one_rank():
    mesh = world_mesh("tp")
    m = make()
    plan = tp_plan()
    if RANK == ODD:
        plan["fc3"] = tt.RowwiseParallel()
    with pytest.raises(ValueError, match=words("no submodule 'fc3'", SP)):
        tt.parallelize_module(m, mesh["tp"], plan)
    plan = tp_plan()
    if RANK == ODD:
        plan["fc1"] = tt.RowwiseParallel()
    with pytest.raises(ValueError, match=words(
            "the plan differs across ranks: rank 0 has 'fc1': "
            "ColwiseParallel(", "rank %d has 'fc1': RowwiseParallel(" % ODD)):
        tt.parallelize_module(m, mesh["tp"], plan)
    assert tuple(m.fc1.weight.shape) == (8, 6)  # unchanged
    assert_tp_output(tt.parallelize_module(m, mesh["tp"], tp_plan()))
    mesh.close()


def test_plan_of_the_wrong_shape():
    mesh = world_mesh("tp")
    m = make()
    with pytest.raises(TypeError, match=words(
            "parallelize_plan is a list: a dict of submodule names to "
            "styles")):
        tt.parallelize_module(m, mesh["tp"], [tt.ColwiseParallel()])
    with pytest.raises(TypeError, match=words(
            "the plan's key 1 is a int, not a submodule name")):
        tt.parallelize_module(m, mesh["tp"], {1: tt.ColwiseParallel()})
    m.alias = m.fc1
    with pytest.raises(ValueError, match=words(
            "the plan names one module twice: 'fc1' and 'alias'")):
        tt.parallelize_module(m, mesh["tp"], {"fc1": tt.ColwiseParallel(),
                                              "alias": tt.ColwiseParallel()})
    del m.alias
    with pytest.raises(TypeError, match=words(
            "module is a str, not a torch.nn.Module")):
        tt.parallelize_module("fc1", mesh["tp"], tp_plan())
    assert_tp_output(tt.parallelize_module(m, mesh["tp"], tp_plan()))
    mesh.close()


def test_style_arguments():
    with pytest.raises(TypeError, match=words(
            "ColwiseParallel: input_layouts is a str: Shard(dim) or "
            "Replicate()")):
        tt.ColwiseParallel(input_layouts="Shard(1)")
    with pytest.raises(TypeError, match=words(
            "RowwiseParallel: output_layouts is a int")):
        tt.RowwiseParallel(output_layouts=3)
    with pytest.raises(TypeError, match=words(
            "SequenceParallel: sequence_dim is a str: an int")):
        tt.SequenceParallel(sequence_dim="1")
    with pytest.raises(TypeError, match=words("Shard: dim is a str")):
        tt.Shard("0")
    mesh = world_mesh("tp")
    m = tt.parallelize_module(make(), mesh["tp"], {
        "fc1": tt.ColwiseParallel(output_layouts=tt.Shard(0))})
    with pytest.raises(ValueError, match=words(
            "the forward of module 'fc1' (ColwiseParallel): output_layouts "
            "Shard(0): a column-wise output is sharded along its last dim")):
        m(data(0, 0)[0])
    mesh.close()
    fresh_trains()


@pytest.mark.skipif(SIZE < 2, reason="needs a rank without vocabulary")
def test_vocabulary_leaving_a_rank_no_rows():
    mesh = world_mesh("tp")
    torch.manual_seed(0)
    m = nn.Sequential(nn.Embedding(1, 4), nn.Linear(4, 8))
    with pytest.raises(ValueError, match=words(
            "'0': a vocabulary of 1 on %d ranks leaves rank 1 no rows" % SIZE,
            "(rank 1 of %d)" % SIZE)):
        tt.parallelize_module(m, mesh["tp"], {"0": tt.RowwiseParallel(),
                                              "1": tt.ColwiseParallel()})
    assert tuple(m[1].weight.shape) == (8, 4)  # nothing changed anywhere
    mesh.close()
    fresh_trains()


# ------------------------------------------- init_device_mesh, all_reduce

@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch can use "
                    "its accelerator: the refusal needs a machine without one")
def test_cuda_mesh_without_a_gpu():
    # issue 34: accepted, then torch's AssertionError later
    with pytest.raises(ValueError, match=words(
            "init_device_mesh: device_type 'cuda': this torch has no usable "
            "GPU (torch.cuda.is_available() is False)")):
        tt.init_device_mesh("cuda", (SIZE,), mesh_dim_names=("dp",))
    fresh_trains()


def test_mesh_arguments():
    # issue 34: no shape gave "'NoneType' object is not iterable"
    cases = [
        (TypeError, "mesh_shape is missing", ("cpu",), {}),
        (ValueError, "device_type 'tpu': tpdp has 'cpu' and 'cuda'",
         ("tpu", (SIZE,)), {}),
        (TypeError, "device_type is a NoneType", (None, (SIZE,)), {}),
        (ValueError, "mesh_shape (%d, 0): dim 1 has size 0" % SIZE,
         ("cpu", (SIZE, 0)), {}),
        (TypeError, "mesh_shape ('2',): a tuple of ints", ("cpu", ("2",)),
         {}),
        (ValueError, "mesh_dim_names: 1 names for the 2 dims",
         ("cpu", (SIZE, 1)), dict(mesh_dim_names=("dp",))),
        (ValueError, "mesh_dim_names: 'dp' appears twice",
         ("cpu", (SIZE, 1)), dict(mesh_dim_names=("dp", "dp"))),
        (TypeError, "mesh_dim_names ('dp', 3): a tuple of str",
         ("cpu", (SIZE, 1)), dict(mesh_dim_names=("dp", 3))),
    ]
    for cls, text, args, kw in cases:
        with pytest.raises(cls, match=words(
                "tpdp.torch.init_device_mesh: " + text,
                "(rank 0 of %d)" % SIZE)):
            tt.init_device_mesh(*args, **kw)
    # one rank alone: refused on every rank
    with pytest.raises(ValueError, match=words("device_type 'tpu'", SP)):
        tt.init_device_mesh("tpu" if RANK == ODD else "cpu", (SIZE,),
                            mesh_dim_names=("dp",))
    mesh = world_mesh()
    with pytest.raises(KeyError, match=words("mesh_dim 'tp': the mesh has "
                                             "no such dim (dims: dp)")):
        mesh.get_local_rank("tp")
    with pytest.raises(ValueError, match=words("mesh_dim 3 is outside the 1 "
                                               "dims")):
        mesh.size(3)
    with pytest.raises(TypeError, match=words("a dim name (str), not a int")):
        mesh[0]
    mesh.close()
    fresh_trains()


def test_all_reduce_arguments():
    mesh = tt.init_device_mesh("cpu", (SIZE, 1), mesh_dim_names=("dp", "tp"))
    t = torch.ones(4)
    cases = [
        (ValueError, "op 'prod': use one of sum, avg, max, min",
         (t, mesh["dp"], "prod")),
        (TypeError, "tensor is a list, not a torch.Tensor",
         ([1.0], mesh["dp"])),
        (TypeError, "all_reduce's tensor has dtype torch.complex64",
         (torch.ones(2, dtype=torch.complex64), mesh["dp"])),
        (ValueError, "the tensor is not contiguous",
         (torch.ones(3, 2).t(), mesh["dp"])),
        (ValueError, "device_mesh must be 1-D", (t, mesh)),
        (TypeError, "device_mesh is a str", (t, "dp")),
    ]
    for cls, text, args in cases:
        with pytest.raises(cls, match=words(text)):
            tt.all_reduce(*args)
    assert t.tolist() == [1.0] * 4
    tt.all_reduce(t, mesh["dp"], "avg")
    assert t.tolist() == [1.0] * 4
    mesh.close()
    fresh_trains()


# -------------------------------------------------------------- fully_shard

def fsdp_trains(model, steps=2, units=("fc1",), ref=None):
    """`model` trains with fully_shard like the module alone on every
    rank's batch (`steps` AdamW steps): a fresh one sharded here on
    `units` and the root, or one sharded already (units=()) whose
    unsharded values `ref` holds. Checks each rank's rows of each
    parameter (the chunk rule: torch.chunk's)."""
    ref = global_ref(model) if ref is None else ref
    for name in units:
        tt.fully_shard(getattr(model, name))
    if units:
        tt.fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    ropt = torch.optim.AdamW(ref.parameters(), lr=0.01)
    for s in range(steps):
        loss_of(model, 900 + s).backward()
        opt.step()
        opt.zero_grad()
        ref_loss(ref, 900 + s).backward()
        ropt.step()
        ropt.zero_grad()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        rows = torch.arange(q.shape[0]).chunk(SIZE)
        want = q[rows[RANK]] if RANK < len(rows) else q[:0]
        assert p.shape == want.shape and rel_err(p, want) <= TOL, n
    model.close()


def test_fully_shard_twice():
    model = make()
    tt.fully_shard(model.fc1)
    tt.fully_shard(model)
    with pytest.raises(tt.TpdpError, match=words(
            "tpdp.torch.fully_shard: the module (a Net) is fully sharded "
            "already, by fully_shard unit #", "the root Net over DeviceMesh(",
            "apply fully_shard to a module once", "(rank 0 of %d)" % SIZE)) \
            as e:
        tt.fully_shard(model)
    assert e.value.status == "TPDP_ERR_ALREADY"
    # one rank alone: refused on every rank, nothing changed anywhere
    model = make()
    tt.fully_shard(model.fc1)
    with pytest.raises(tt.TpdpError, match=words(
            "the module (a Linear) is fully sharded already", SP)):
        tt.fully_shard(model.fc1 if RANK == ODD else model)
    tt.fully_shard(model)
    fsdp_trains(model, units=(), ref=make())


def test_fully_shard_child_after_its_parent():
    model = make()
    tt.fully_shard(model)  # the root first: it manages fc1 and fc2
    with pytest.raises(tt.TpdpError, match=words(
            "tpdp.torch.fully_shard: the module (a Linear) is inside "
            "fully_shard unit #", "the root Net", "already: apply "
            "fully_shard to the submodules first and to their parent (the "
            "root) last", "(rank 0 of %d)" % SIZE)) as e:
        tt.fully_shard(model.fc1)
    assert e.value.status == "TPDP_ERR_STATE"
    fsdp_trains(model, units=(), ref=make())


def test_fully_shard_mesh_not_spanning_the_world():
    # a mesh of another size than the world's cannot be made ...
    with pytest.raises(tt.TpdpError, match=words(
            "mesh [%d] has %d ranks but communicator world has %d"
            % (SIZE + 1, SIZE + 1, SIZE))) as e:
        tt.init_device_mesh("cpu", (SIZE + 1,), mesh_dim_names=("dp",))
    assert e.value.status == "TPDP_ERR_MESH_SIZE"
    # ... and a slice of one that leaves a dim nobody reduces over is
    # refused (the ranks along "tp" would train apart)
    mesh = tt.init_device_mesh("cpu", (1, SIZE), mesh_dim_names=("dp", "tp"))
    with pytest.raises(tt.TpdpError, match=words(
            "tpdp.torch.fully_shard: mesh DeviceMesh('cpu', (1,), "
            "mesh_dim_names=('dp',)) spans 1 of the %d ranks: the other dim "
            "'tp' (size %d)" % (SIZE, SIZE), "neither sharded over here nor "
            "used by parallelize_module", "(rank 0 of %d)" % SIZE)) as e:
        tt.fully_shard(make(), mesh=mesh["dp"])
    assert e.value.status == "TPDP_ERR_MESH_SIZE"
    mesh.close()
    fsdp_trains(make())


def test_optimizer_built_before_fully_shard():
    model = make()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    with pytest.raises(tt.TpdpError, match=words(
            "tpdp.torch.fully_shard: parameter 'weight' is held by an "
            "optimizer (AdamW) built before fully_shard", "build the "
            "optimizer after fully_shard", "(rank 0 of %d)" % SIZE)) as e:
        tt.fully_shard(model.fc1)
    assert e.value.status == "TPDP_ERR_STATE"
    # on one rank only: every rank refuses
    if RANK != ODD:
        opt = None
    with pytest.raises(tt.TpdpError, match=words(
            "held by an optimizer (AdamW) built before fully_shard", SP)):
        tt.fully_shard(model.fc1)
    del opt
    fsdp_trains(model)


def test_fully_shard_of_parameters_with_hooks_of_their_own():
    """fully_shard makes new parameters (the shards): hooks registered on
    the old ones would silently stop running."""
    kinds = [("register_hook", lambda p: p.register_hook(lambda g: g))]
    if hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
        kinds.append(("register_post_accumulate_grad_hook",
                      lambda p: p.register_post_accumulate_grad_hook(
                          lambda p: None)))
    for kind, add in kinds:
        model = make()
        add(model.fc1.bias)
        with pytest.raises(ValueError, match=words(
                "tpdp.torch.fully_shard: parameter 'fc1.bias' has hooks of "
                "its own (%s)" % kind, "register them after fully_shard",
                "(rank 0 of %d)" % SIZE)):
            tt.fully_shard(model)
        # on one rank only: every rank refuses
        model = make()
        if RANK == ODD:
            add(model.fc1.bias)
        with pytest.raises(ValueError, match=words(
                "has hooks of its own (%s)" % kind, SP)):
            tt.fully_shard(model)
    fsdp_trains(make())


def test_parameters_swapped_on_conversion(monkeypatch):
    """torch 2.3+'s swap_module_params_on_conversion (module.to() and
    load_state_dict swap the parameters' contents, __dict__ included) is
    refused by each wrapper, on every rank; set on one rank only too."""
    mesh = tt.init_device_mesh("cpu", (SIZE,), mesh_dim_names=("tp",))
    wraps = [("DistributedDataParallel", tt.DistributedDataParallel),
             ("fully_shard", tt.fully_shard),
             ("parallelize_module", lambda m: tt.parallelize_module(
                 m, mesh, {"fc1": tt.ColwiseParallel()}))]
    for one_rank in (False, True):
        on = not one_rank or RANK == ODD
        monkeypatch.setattr(torch.__future__,
                            "get_swap_module_params_on_conversion",
                            lambda: on, raising=False)
        for name, wrap in wraps:
            model = make()
            with pytest.raises(ValueError, match=words(
                    "tpdp.torch.%s: torch.__future__.set_swap_module_params_"
                    "on_conversion(True) is in effect" % name,
                    "set it back to False",
                    SP if one_rank else "(rank 0 of %d)" % SIZE)):
                wrap(model)
            assert type(model) is Net and model.fc1.weight.shape == (8, 6)
    monkeypatch.undo()
    mesh.close()
    fsdp_trains(make())


def test_fully_shard_options_and_arguments():
    cases = [
        (TypeError, "module is a str, not a torch.nn.Module", ("fc1",), {}),
        (TypeError, "reshard_after_forward is a str: True or False",
         (make(),), dict(reshard_after_forward="yes")),
        (ValueError, "reshard_after_forward=2: resharding to another number "
         "of ranks is not supported", (make(),),
         dict(reshard_after_forward=2)),
        (TypeError, "mp_policy is a builtins.dict, not a "
         "MixedPrecisionPolicy (tpdp.torch's, or torch.distributed.fsdp's)",
         (make(),), dict(mp_policy={})),
        (ValueError, "mp_policy.param_dtype torch.float64: tpdp's units have "
         "torch.float32, torch.bfloat16, torch.float16", (make(),),
         dict(mp_policy=tt.MixedPrecisionPolicy(param_dtype=torch.float64))),
        (TypeError, "mesh is a str, not a tpdp.torch.DeviceMesh", (make(),),
         dict(mesh="dp")),
        (TypeError, "parameter 'fc1.weight' has dtype torch.float64: tpdp's "
         "units shard float32 parameters", (make().double(),), {}),
    ]
    for cls, text, args, kw in cases:
        with pytest.raises(cls, match=words("tpdp.torch.fully_shard: " + text,
                                            "(rank 0 of %d)" % SIZE)):
            tt.fully_shard(*args, **kw)
    with pytest.raises(ValueError, match=words(
            "fully_shard: the module or an option differs across ranks: "
            "rank 0 has reshard_after_forward=True, rank %d has "
            "reshard_after_forward=False" % ODD)):
        tt.fully_shard(make(), reshard_after_forward=RANK != ODD)
    model = nn.Sequential(make())
    tt.fully_shard(model[0])
    with pytest.raises(ValueError, match=words(
            "the module (a Sequential) has no parameter outside its fully "
            "sharded submodules")):
        tt.fully_shard(model)
    model[0].close()
    fsdp_trains(make())


@pytest.mark.skipif(tt._lib.FULLY_SHARD_OPTIONS_VERSION >= 3,
                    reason="this libtpdp has HSDP (the refusal is for one "
                    "without)")
def test_hsdp_without_the_library_s_hsdp():
    mesh = tt.init_device_mesh("cpu", (SIZE, 1), mesh_dim_names=(
        "dp_replicate", "dp_shard"))
    with pytest.raises(tt.TpdpError, match=words(
            "HSDP (a 2-D mesh of more than one replica) needs a libtpdp "
            "whose tpdp_fully_shard_options have version 3")) as e:
        tt.fully_shard(make(), mesh=mesh)
    assert e.value.status == "TPDP_ERR_UNSUPPORTED"
    mesh.close()
    fsdp_trains(make())


def test_fully_shard_and_the_other_wrappers():
    model = make()
    ddp = tt.DistributedDataParallel(model)
    with pytest.raises(ValueError, match=words(
            "fully_shard: parameter 'weight' is held by "
            "DistributedDataParallel #", "close() that wrapper first")):
        tt.fully_shard(model.fc1)
    ddp.close()
    model = make()
    tt.fully_shard(model)
    with pytest.raises(ValueError, match=words(
            "its parameter 'fc1.weight' is held by fully_shard unit #")):
        tt.DistributedDataParallel(model)
    mesh = world_mesh("tp")
    with pytest.raises(ValueError, match=words(
            "parameter 'fc1.weight' is held by fully_shard unit #",
            "parallelize the module before wrapping it")):
        tt.parallelize_module(model, mesh["tp"], tp_plan())
    mesh.close()
    fsdp_trains(model, units=(), ref=make())


def test_fully_shard_parameter_replaced_on_one_rank():
    model = make()
    tt.fully_shard(model)
    loss_of(model, 0).backward()
    if RANK == ODD:
        model.fc2.bias = nn.Parameter(model.fc2.bias.detach().clone())
    with pytest.raises(ValueError, match=words(
            "parameter 'fc2.bias' of fully_shard unit #", "was replaced "
            "after fully_shard (rank %d)" % ODD, "copy values into it in "
            "place")):
        loss_of(model, 1)
    model.close()
    fsdp_trains(make())


def test_fully_shard_ranks_out_of_step():
    model = make()
    tt.fully_shard(model.fc1)
    tt.fully_shard(model)
    loss = loss_of(model, 0)
    if RANK != ODD:  # a backward missing on one rank
        with pytest.raises(tt.TpdpError, match=words(
                "the ranks are out of step: rank 0 in a backward of step 1",
                "rank %d in a forward under grad of step 1" % ODD,
                "close() the model's units")) as e:
            loss.backward()
    else:
        with pytest.raises(tt.TpdpError, match=words(
                "the ranks are out of step")) as e:
            loss_of(model, 1)
    assert e.value.status == "TPDP_ERR_STATE"
    with pytest.raises(tt.TpdpError, match=words("out of step")):
        loss_of(model, 2)  # broken until closed
    model.close()
    fsdp_trains(make())


def test_fully_shard_set_requires_gradient_sync_on_a_nested_unit():
    model = make()
    tt.fully_shard(model.fc1)
    tt.fully_shard(model)
    with pytest.raises(tt.TpdpError, match=words(
            "set_requires_gradient_sync on fully_shard unit #", "'fc1' "
            "(Linear)", "call it on the root unit (fully_shard unit #")) \
            as e:
        model.fc1.set_requires_gradient_sync(False)
    assert e.value.status == "TPDP_ERR_UNSUPPORTED"
    fsdp_trains(model, units=(), ref=make())


def test_fully_shard_after_its_mesh_closed():
    mesh = world_mesh()
    model = make()
    tt.fully_shard(model, mesh=mesh["dp"])
    loss_of(model, 0).backward()
    mesh.close()
    with pytest.raises(tt.TpdpError, match=words(
            "the forward of FSDPNet", "fully_shard unit #", "is closed (",
            "was closed)")) as e:
        loss_of(model, 1)
    assert e.value.status == "TPDP_ERR_STATE"
    with pytest.raises(tt.TpdpError, match=words("fully_shard (mesh)",
                                                 "is closed")):
        tt.fully_shard(make(), mesh=mesh)
    fsdp_trains(make())
