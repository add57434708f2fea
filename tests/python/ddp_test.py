# SPDX-License-Identifier: BSD-3-Clause
"""tpdp.torch.DistributedDataParallel against torch's own DDP on gloo: the
same model (same seed) trained on the same per-rank data for 10 AdamW steps
must end with the same parameters (1e-6 relative); the initial buckets are
those of torch's _compute_bucket_assignment_by_size; the traps of the issue
and the error cases."""
import copy
import ctypes
import gc

import pytest
import torch
from torch import nn

import tpdp.torch as tt
from conftest import assert_params_close
from tpdp import _lib
from tpdp.torch import _dlpack

STEPS = 10
TOL = 1e-6
RANK, SIZE = tt.rank(), tt.world_size()


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4,
                                           dim_feedforward=64, dropout=0.0,
                                           batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(32, 5)
        # The key third of in_proj_bias has a gradient of exactly 0 (softmax
        # ignores a constant shift), so it holds only rounding noise, which
        # depends on the order of the sum over 3 ranks and which AdamW
        # scales up to full steps: frozen, so that 1e-6 compares the rest.
        for layer in self.enc.layers:
            layer.self_attn.in_proj_bias.requires_grad_(False)

    def forward(self, x, step):
        return self.head(self.enc(x))


class BranchyMLP(nn.Module):
    """A branch used on some steps by some ranks only."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 24)
        self.branch = nn.Linear(24, 24)
        self.fc2 = nn.Linear(24, 5)

    def forward(self, x, step):
        h = torch.tanh(self.fc1(x))
        if (step + RANK) % SIZE != 0:
            h = h + torch.tanh(self.branch(h))
        return self.fc2(h)


def make(cls, seed=1):
    torch.manual_seed(seed)
    return cls()


def batch(step, cls, micro=0):
    g = torch.Generator().manual_seed(1000 * step + 100 * RANK + micro)
    if cls is Transformer:
        x = torch.randn(3, 6, 32, generator=g)
    else:
        x = torch.randn(4, 12, generator=g)
    return x, torch.randn(x.shape[:-1] + (5,), generator=g)


def train(ddp, model_cls, steps=STEPS, micro=1, set_to_none=False):
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, weight_decay=0.1)
    for step in range(steps):
        for m in range(micro):
            x, y = batch(step, model_cls, m)
            if m < micro - 1:
                with ddp.no_sync():
                    nn.functional.mse_loss(ddp(x, step), y).backward()
            else:
                nn.functional.mse_loss(ddp(x, step), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)
    return ddp


def torch_ddp(model, gloo, **kw):
    return nn.parallel.DistributedDataParallel(model, **kw)


@pytest.mark.parametrize("cls,find_unused", [(Transformer, False),
                                             (BranchyMLP, True)])
def test_trains_like_torch_ddp(gloo, cls, find_unused):
    ref = train(torch_ddp(make(cls), gloo, bucket_cap_mb=0.02,
                          find_unused_parameters=find_unused), cls)
    ours = tt.DistributedDataParallel(make(cls), bucket_cap_mb=0.02,
                                      find_unused_parameters=find_unused)
    train(ours, cls)
    assert_params_close(ours.module, ref.module, TOL)
    assert ours.stats()["iterations"] == STEPS
    if SIZE > 1 and not find_unused:
        assert ours._rebuilt  # the buckets moved once: grads follow
    for i, p in enumerate(ours._params):
        assert ours._cv.is_given(i, p.grad)  # the bucket's memory
    ours.close()


def test_bucket_assignment_is_torchs(gloo):
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(200, 200) for _ in range(8)],
                          nn.LayerNorm(200))
    params = list(model.parameters())
    cap = 0.1
    fn = getattr(torch.distributed, "_compute_bucket_assignment_by_size",
                 None) or torch._C._distributed_c10d.\
        _compute_bucket_assignment_by_size
    buckets, _ = fn(params, [1024 * 1024, int(cap * 1024 * 1024)],
                    [False] * len(params))
    ours = tt.DistributedDataParallel(model, bucket_cap_mb=cap)
    assert len(buckets) > 2
    # torch's DDP launches them in reverse, as tpdp's reducer does.
    assert ours.bucket_indices() == [list(b) for b in reversed(buckets)]
    ours.close()


def test_no_sync_accumulates_like_torch(gloo):
    ref = train(torch_ddp(make(Transformer), gloo, bucket_cap_mb=0.02),
                Transformer, steps=4, micro=3)
    ours = train(tt.DistributedDataParallel(make(Transformer),
                                            bucket_cap_mb=0.02),
                 Transformer, steps=4, micro=3)
    assert_params_close(ours.module, ref.module, TOL)
    ours.close()


# Transformer: the buckets are rebuilt in the second backward, after its
# first gradient is in (torch 2.x's default zero_grad sets None: the
# rebuild must neither drop that gradient nor expose the last step's values
# to the others' accumulation, as it did before).
@pytest.mark.parametrize("cls,find_unused", [(Transformer, False),
                                             (BranchyMLP, True)])
def test_zero_grad_set_to_none_rebinds_views(gloo, cls, find_unused):
    ref = train(torch_ddp(make(cls), gloo, bucket_cap_mb=0.001,
                          find_unused_parameters=find_unused), cls,
                steps=4, set_to_none=True)
    ours = tt.DistributedDataParallel(make(cls), bucket_cap_mb=0.001,
                                      find_unused_parameters=find_unused)
    train(ours, cls, steps=4, set_to_none=True)
    assert_params_close(ours.module, ref.module, TOL)
    if SIZE > 1 and not find_unused:
        assert ours._rebuilt
    assert all(p.grad is None for p in ours._params)
    x, y = batch(5, cls)
    nn.functional.mse_loss(ours(x, 5), y).backward()
    for i, p in enumerate(ours._params):
        assert ours._cv.is_given(i, p.grad)  # bound to the bucket again
    ours.close()


def test_capsule_outlives_the_call():
    # The tpdp view of a temporary: the capsule keeps its memory alive.
    v = _dlpack.View(torch.arange(6, dtype=torch.float32) * 2)
    gc.collect()
    junk = [torch.full((6,), -1.0) for _ in range(50)]  # noqa: F841
    out = torch.zeros(6)
    o = _dlpack.View(out)
    _lib.call("tpdp_allreduce", _lib.world(), v.ref, o.ref, _lib.OP_MAX)
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_requires_grad_tensor_passes_detached():
    p = nn.Parameter(torch.ones(4))
    v = _dlpack.View(p)
    assert v.t.data == p.data_ptr()


def test_parameter_replaced_after_wrapping():
    model = make(BranchyMLP)
    ddp = tt.DistributedDataParallel(model)
    model.fc2.weight = nn.Parameter(torch.zeros(5, 24))
    with pytest.raises(ValueError, match="parameter 'fc2.weight' was "
                       "replaced after wrapping"):
        ddp(torch.randn(2, 12), 0)
    ddp.close()


def test_unused_without_find_unused_is_a_tpdp_error():
    model = make(BranchyMLP)
    ddp = tt.DistributedDataParallel(model)
    x, y = batch(0, BranchyMLP)
    # every rank leaves the branch out
    model.forward = lambda x, step: model.fc2(torch.tanh(model.fc1(x)))
    h = ddp(x, 0)
    with pytest.raises(tt.TpdpError) as e:
        nn.functional.mse_loss(h, y).backward()
    assert e.value.status == "TPDP_ERR_STATE"
    assert "branch.weight" in str(e.value)
    # mark the rest so that the others' reductions complete, then close
    for i, n in enumerate(ddp._names):
        if n.startswith("branch."):
            _lib.call("tpdp_reducer_mark_ready", ddp._r, i)
    _lib.call("tpdp_reducer_finalize", ddp._r)
    ddp.close()


def test_misuse_raises_before_any_collective():
    with pytest.raises(ValueError, match="comm_hook 'int8'"):
        tt.DistributedDataParallel(make(BranchyMLP), comm_hook="int8")
    with pytest.raises(TypeError, match="not a torch.nn.Module"):
        tt.DistributedDataParallel(lambda x: x)
    m = nn.Linear(3, 3)
    m.phase = nn.Parameter(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(TypeError, match="parameter 'phase' has dtype "
                       "torch.complex64"):
        tt.DistributedDataParallel(m)
    mesh = tt.init_device_mesh("cpu", (SIZE,), mesh_dim_names=("dp",))
    with pytest.raises(KeyError, match="no dim 'tp'"):
        mesh["tp"]
    with pytest.raises(ValueError, match="1-D"):
        tt.DistributedDataParallel(make(BranchyMLP), device_mesh=tt.
                                   init_device_mesh("cpu", (SIZE, 1),
                                                    mesh_dim_names=("a", "b")))


def test_tpdp_failure_is_a_tpdp_error_with_status_and_message():
    with pytest.raises(tt.TpdpError) as e:
        tt.init_device_mesh("cpu", (SIZE + 1,), mesh_dim_names=("dp",))
    assert e.value.status == "TPDP_ERR_MESH_SIZE"
    assert e.value.message and e.value.message in str(e.value)


@pytest.mark.parametrize("hook", ["bf16", "fp16"])
def test_compression_hooks_stay_close(gloo, hook):
    ref = train(torch_ddp(make(BranchyMLP), gloo, find_unused_parameters=True),
                BranchyMLP, steps=3)
    ours = train(tt.DistributedDataParallel(make(BranchyMLP), comm_hook=hook,
                                            find_unused_parameters=True),
                 BranchyMLP, steps=3)
    assert_params_close(ours.module, ref.module, 2e-2)
    ours.close()


def test_world_of_ranks_matches_mpi4py():
    mpi = pytest.importorskip("mpi4py.MPI", reason="mpi4py is not installed")
    assert (tt.rank(), tt.world_size()) == (mpi.COMM_WORLD.Get_rank(),
                                            mpi.COMM_WORLD.Get_size())
    assert ctypes.sizeof(_lib.ReducerOptions) == \
        _lib.lib.tpdp_reducer_options_default().size
    assert copy is not None


class NormNet(nn.Module):
    """BatchNorm's running statistics: buffers DDP copies from rank 0."""

    def __init__(self):
        super().__init__()
        # no bias before BatchNorm: its gradient would be rounding noise
        # (BatchNorm removes the mean), which AdamW scales up
        self.fc1 = nn.Linear(12, 16, bias=False)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x, step):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


@pytest.mark.parametrize("view", [True, False])
def test_buffers_and_copy_mode_like_torch_ddp(gloo, view):
    ref = train(torch_ddp(make(NormNet), gloo, bucket_cap_mb=0.001,
                          gradient_as_bucket_view=view), BranchyMLP, steps=5)
    ours = train(tt.DistributedDataParallel(make(NormNet), bucket_cap_mb=0.001,
                                            gradient_as_bucket_view=view),
                 BranchyMLP, steps=5)
    assert_params_close(ours.module, ref.module, TOL)
    for (n, a), (_, b) in zip(ours.module.named_buffers(),
                              ref.module.named_buffers()):
        assert torch.allclose(a.double(), b.double(), rtol=TOL, atol=0), n
    ours.close()


def test_wrapped_under_no_grad_still_reduces():
    with torch.no_grad():
        ddp = tt.DistributedDataParallel(nn.Linear(3, 2))
    x = torch.full((1, 3), float(RANK + 1))
    ddp(x).sum().backward()
    # d(sum)/d(weight) = x on each rank: the average of 1..SIZE
    assert torch.allclose(ddp.module.weight.grad,
                          torch.full((2, 3), (SIZE + 1) / 2.0))
    ddp.close()
