# SPDX-License-Identifier: BSD-3-Clause
"""tpdp.torch on one GPU (scripts/gpu-check runs it with a libtpdp.so built
with CUDA and NCCL): CUDA tensors through DLPack with the NCCL backend,
DistributedDataParallel and fully_shard at world size 1 against the module
alone, and the TP styles' numerics against the unparallelized module on the
GPU. Not run yet (no GPU lent since fully_shard's case was written). Skipped,
with the reason, where torch has no CUDA or libtpdp no NCCL."""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
from torch import nn  # noqa: E402

import tpdp.torch as tt  # noqa: E402
from tpdp import _lib  # noqa: E402

if not torch.cuda.is_available():
    WHY = "torch.cuda is not available (no GPU or a CPU-only torch)"
elif not _lib.lib.tpdp_nccl_available():
    WHY = "libtpdp.so was built without NCCL (--config=cuda; scripts/gpu-check)"
elif tt.world_size() != 1:
    WHY = "the GPU test runs on one rank"
else:
    WHY = None
pytestmark = pytest.mark.skipif(WHY is not None, reason=str(WHY))

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEV = torch.device("cuda", 0) if WHY is None else None
TOL = 1e-5


def rel_err(a, b):
    d = (a.detach().double() - b.detach().double()).norm().item()
    n = b.detach().double().norm().item()
    return d / n if n else d


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 8)).to(DEV)


def train_side_by_side(ref, ours):
    """5 AdamW steps of each on the same batches."""
    o1 = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    o2 = torch.optim.AdamW(ours.parameters(), lr=1e-3)
    for step in range(5):
        g = torch.Generator(device=DEV).manual_seed(step)
        x = torch.randn(4, 16, device=DEV, generator=g)
        for m, o in ((ref, o1), (ours, o2)):
            m(x).square().mean().backward()
            o.step()
            o.zero_grad()


def test_ddp_world_size_1_trains_like_the_module():
    ref, ours = mlp(), tt.DistributedDataParallel(
        mlp(), device_mesh=tt.init_device_mesh("cuda", (1,),
                                               mesh_dim_names=("dp",))["dp"])
    assert ours._params[0].grad.is_cuda
    train_side_by_side(ref, ours)
    for a, b in zip(ours.module.parameters(), ref.parameters()):
        assert rel_err(a, b) <= TOL
    ours.close()


def test_tp_styles_on_the_gpu():
    mesh = tt.init_device_mesh("cuda", (1,), mesh_dim_names=("tp",))
    ref = mlp()
    par = tt.parallelize_module(mlp(), mesh["tp"], {
        "0": tt.ColwiseParallel(), "2": tt.RowwiseParallel()})
    x = torch.randn(4, 16, device=DEV)
    assert rel_err(par(x), ref(x)) <= TOL
    y = torch.ones(3, device=DEV)
    tt.all_reduce(y, mesh["tp"])
    assert y.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("reshard", [True, False])
def test_fully_shard_world_size_1_trains_like_the_module(reshard):
    """fully_shard on CUDA tensors: the library's CUDA units (float32, NCCL
    at world size 1, ordered on torch's current stream), the first Linear
    a unit and the root the other; AdamW over the shards."""
    mesh = tt.init_device_mesh("cuda", (1,), mesh_dim_names=("dp",))
    ref, model = mlp(), mlp()
    tt.fully_shard(model[0], mesh=mesh["dp"], reshard_after_forward=reshard)
    tt.fully_shard(model, mesh=mesh["dp"], reshard_after_forward=reshard)
    assert all(p.is_cuda for p in model.parameters())
    train_side_by_side(ref, model)
    torch.cuda.synchronize()
    for (n, a), b in zip(model.named_parameters(), ref.parameters()):
        assert a.shape == b.shape, n  # one rank: the shard is the tensor
        assert rel_err(a, b) <= TOL, n
    model.close()
    mesh.close()
