# SPDX-License-Identifier: BSD-3-Clause
"""tpdp.torch.parallelize_module against the unparallelized module: forward
outputs and gradients (of each rank's shard) within 1e-5, with feature
counts, vocabulary and sequence length that the ranks do not divide; with
a 2x2 mesh, TP + DDP trains like one process for 10 AdamW steps. And the
plan's misuse errors."""
import copy

import pytest
import torch
from torch import nn

import tpdp.torch as tt
from conftest import rel_err
from tpdp.torch._placement_types import chunk_range as tpdp_chunk_range

TOL = 1e-5
RANK, SIZE = tt.rank(), tt.world_size()
V, D, HID, OUT, B, T = 37, 10, 15, 7, 3, 7


def chunk_range(n, size, rank):
    """[lo, hi) of rank's part of torch.chunk(range(n), size), padded with
    empty parts to `size` (the reference: torch itself)."""
    parts = torch.arange(n).chunk(size) if n else ()
    if rank >= len(parts):
        return n, n
    return int(parts[rank][0]), int(parts[rank][-1]) + 1


def test_chunk_rule_is_torch_chunk():
    # tpdp_chunk_range (the C library's rule, which the binding calls)
    for n in range(0, 40):
        for size in range(1, 9):
            for r in range(size):
                assert tpdp_chunk_range(n, size, r) == chunk_range(n, size, r)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.fc1 = nn.Linear(D, HID)
        self.fc2 = nn.Linear(HID, D)
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, OUT)

    def forward(self, ids):
        h = self.emb(ids)
        h = h + self.fc2(torch.relu(self.fc1(h)))
        return self.head(self.ln(h))


def make():
    torch.manual_seed(3)
    return Net()


def ids_batch(seed):
    return torch.randint(0, V, (B, T), generator=torch.Generator()
                         .manual_seed(seed))


SHARD_DIMS = {  # the dim each sharded parameter was chunked along
    "tp": {"emb.weight": 0, "fc1.weight": 0, "fc1.bias": 0, "fc2.weight": 1,
           "head.weight": 0, "head.bias": 0},
    "sp": {"emb.weight": 0, "fc1.weight": 0, "fc1.bias": 0, "fc2.weight": 1},
}


def plan(kind):
    if kind == "tp":
        return {"emb": tt.RowwiseParallel(), "fc1": tt.ColwiseParallel(),
                "fc2": tt.RowwiseParallel(),
                "head": tt.ColwiseParallel(output_layouts=tt.Replicate())}
    # sequence parallel: embedding output, residual and LayerNorm sharded
    # along the sequence, fc1 gathers it, fc2 scatters it back
    return {"emb": tt.RowwiseParallel(output_layouts=tt.Shard(1)),
            "fc1": tt.ColwiseParallel(input_layouts=tt.Shard(1)),
            "fc2": tt.RowwiseParallel(output_layouts=tt.Shard(1)),
            "ln": tt.SequenceParallel()}


def local_of(full, name, dims, size, rank):
    if name not in dims:
        return full
    lo, hi = chunk_range(full.shape[dims[name]], size, rank)
    return full.narrow(dims[name], lo, hi - lo)


@pytest.mark.parametrize("kind", ["tp", "sp"])
def test_forward_and_grads_match_unparallelized(kind):
    mesh = tt.init_device_mesh("cpu", (SIZE,), mesh_dim_names=("tp",))
    ref, par = make(), make()
    tt.parallelize_module(par, mesh["tp"], plan(kind))
    ids = ids_batch(7)
    y_ref = ref(ids)
    y = par(ids)
    if kind == "sp":  # the head runs on this rank's sequence chunk
        lo, hi = chunk_range(T, SIZE, RANK)
        y_ref_local = y_ref[:, lo:hi]
    else:
        y_ref_local = y_ref
    assert y.shape == y_ref_local.shape
    assert rel_err(y, y_ref_local) <= TOL
    w = torch.randn(y_ref.shape, generator=torch.Generator().manual_seed(9))
    (y_ref * w).sum().backward()
    w_local = w[:, lo:hi] if kind == "sp" else w
    (y * w_local).sum().backward()
    dims = SHARD_DIMS[kind]
    for (n, p), (_, q) in zip(par.named_parameters(), ref.named_parameters()):
        expect = local_of(q.grad, n, dims, SIZE, RANK)
        if kind == "sp" and n.startswith("head."):
            # the head is not parallelized: its gradient is this rank's
            # sequence chunk's part; summed over ranks it is the whole
            got = p.grad.clone()
            tt.all_reduce(got, mesh["tp"])
        else:
            got = p.grad
        assert p.shape == expect.shape, n
        assert rel_err(got, expect) <= TOL, "gradient of %s" % n


def test_uneven_shapes_follow_the_chunk_rule():
    mesh = tt.init_device_mesh("cpu", (SIZE,), mesh_dim_names=("tp",))
    par = tt.parallelize_module(make(), mesh["tp"], plan("tp"))
    lo, hi = chunk_range(HID, SIZE, RANK)
    assert par.fc1.weight.shape == (hi - lo, D)
    assert par.fc2.weight.shape == (D, hi - lo)
    lo, hi = chunk_range(V, SIZE, RANK)
    assert par.emb.weight.shape == (hi - lo, D)


@pytest.mark.skipif(SIZE != 4, reason="the 2x2 mesh needs 4 ranks")
def test_tp_dp_2x2_trains_like_one_process():
    mesh = tt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh.get_local_rank("dp")
    tp_rank = mesh.get_local_rank("tp")
    ref = make()
    par = tt.parallelize_module(make(), mesh["tp"], plan("sp"))
    ddp = tt.DistributedDataParallel(par, device_mesh=mesh["dp"])
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    lo, hi = chunk_range(T, 2, tp_rank)
    for step in range(10):
        ids = torch.cat([ids_batch(100 * step + d) for d in range(2)])
        tgt = torch.randn((2 * B, T, OUT),
                          generator=torch.Generator().manual_seed(step))
        loss = ((ref(ids) - tgt) ** 2).sum() / tgt.numel()
        loss.backward()
        opt_ref.step()
        opt_ref.zero_grad()
        mine = slice(dp_rank * B, (dp_rank + 1) * B)
        y = ddp(ids[mine])
        # this rank's sum over its sequence chunk, scaled so that the sum
        # over the TP ranks and the average over DP is the reference loss
        local = ((y - tgt[mine][:, lo:hi]) ** 2).sum() / (B * T * OUT)
        local.backward()
        # the head's gradients are partial over the sequence chunks
        for p in par.head.parameters():
            tt.all_reduce(p.grad, mesh["tp"])
        opt.step()
        opt.zero_grad()
    dims = SHARD_DIMS["sp"]
    for (n, p), (_, q) in zip(par.named_parameters(), ref.named_parameters()):
        assert rel_err(p, local_of(q, n, dims, 2, tp_rank)) <= TOL, n
    ddp.close()


def test_plan_misuse_raises_before_any_collective():
    mesh = tt.init_device_mesh("cpu", (SIZE,), mesh_dim_names=("tp",))
    m = make()
    before = copy.deepcopy(m.state_dict())
    with pytest.raises(ValueError, match="no submodule 'fc3'"):
        tt.parallelize_module(m, mesh["tp"], {"fc1": tt.ColwiseParallel(),
                                              "fc3": tt.RowwiseParallel()})
    with pytest.raises(TypeError, match="'ln' is a LayerNorm; "
                       "ColwiseParallel applies to nn.Linear, nn.Embedding"):
        tt.parallelize_module(m, mesh["tp"], {"ln": tt.ColwiseParallel()})
    with pytest.raises(TypeError, match="'fc1' is a Linear; SequenceParallel"):
        tt.parallelize_module(m, mesh["tp"], {"fc1": tt.SequenceParallel()})
    # nothing changed
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k])
