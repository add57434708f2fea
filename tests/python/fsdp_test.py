# SPDX-License-Identifier: BSD-3-Clause
"""tpdp.torch.fully_shard against the unwrapped module trained in one
process on every rank's batch: each rank's shard of every parameter within
1e-4 (relative) after 10 AdamW steps, at reshard_after_forward True and
False, in float32 and under mixed precision (the reference then applies
the policy's casts itself: bf16 parameters and inputs, each rank's
gradients computed apart and averaged in rank order in reduce_dtype, as
the units do); accumulation over 3 micro-batches with
set_requires_gradient_sync; gradients adding up across backwards (FSDP2);
unshard()/reshard(); the lifetime (close, collection). On 4 ranks also HSDP
(2 x 2) and TP + FSDP (2 x 2); on 8, the 3-D (dp_replicate, dp_shard, tp)
= (2, 2, 2) mesh of torchtitan. The model's dim-0 sizes (7, 9, 3) do not
divide by the ranks; on 4 ranks one rank holds no row of a 3-row tensor."""
import copy
import ctypes
import gc
import os
import weakref

import pytest
import torch
from torch import nn

import tpdp.torch as tt
from conftest import rel_err
from tpdp import _lib
from tpdp.torch import _heap

RANK, SIZE = tt.rank(), tt.world_size()
TOL = 1e-4
STEPS = 10
B = 4  # rows per data-parallel rank
D_IN, H, F, OUT = 5, 7, 9, 3
HSDP = _lib.FULLY_SHARD_OPTIONS_VERSION >= 3
needs_hsdp = pytest.mark.skipif(not HSDP, reason="needs C HSDP (options v3)")
one_d = pytest.mark.skipif(SIZE > 4, reason="the 1-D cases run on 2 and 4 "
                           "ranks")


def chunk_range(n, size, rank):
    """[lo, hi) of rank's part of torch.chunk(range(n), size) (the
    reference: torch's own rule, not the library's)."""
    parts = torch.arange(n).chunk(size) if n else ()
    if rank >= len(parts):
        return n, n
    return int(parts[rank][0]), int(parts[rank][-1]) + 1


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(H)
        self.fc1 = nn.Linear(H, F)
        self.fc2 = nn.Linear(F, H)

    def forward(self, x):
        return x + self.fc2(torch.tanh(self.fc1(self.ln(x))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(D_IN, H)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.out = nn.Linear(H, OUT)

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return self.out(h)


def make(seed=3):
    torch.manual_seed(seed)
    return Net()


def batch(step, d):
    g = torch.Generator().manual_seed(1000 * step + d)
    return torch.randn(B, D_IN, generator=g), torch.randn(B, OUT, generator=g)


def mse(out, y):
    return ((out.float() - y) ** 2).mean()


# the parameters TP shards (test_tp_*): the dim each is chunked along
TP_PLAN = {"blocks.%d.fc1" % i: tt.ColwiseParallel for i in range(2)}
TP_PLAN.update({"blocks.%d.fc2" % i: tt.RowwiseParallel for i in range(2)})
TP_DIMS = {}
for i in range(2):
    TP_DIMS.update({"blocks.%d.fc1.weight" % i: 0, "blocks.%d.fc1.bias" % i: 0,
                    "blocks.%d.fc2.weight" % i: 1})


def expected(full, fqn, dp, tp=(1, 0)):
    """This rank's piece of the reference's tensor `full`: its TP chunk
    (tp = (size, rank)), then its rows of dim 0 over the dp shards
    (dp = (size, rank))."""
    t = full.detach()
    if tp[0] > 1 and fqn in TP_DIMS:
        d = TP_DIMS[fqn]
        lo, hi = chunk_range(t.shape[d], *tp)
        t = t.narrow(d, lo, hi - lo)
    lo, hi = chunk_range(t.shape[0], *dp)
    return t[lo:hi]


def assert_shards(model, ref, dp, tp=(1, 0), tol=TOL, what=""):
    got = dict(model.named_parameters())
    for n, q in ref.named_parameters():
        want = expected(q, n, dp, tp)
        p = got[n]
        assert p.shape == want.shape, "%s%s: shape %s, expected %s" % (
            what, n, tuple(p.shape), tuple(want.shape))
        e = rel_err(p, want) if want.numel() else 0.0
        assert e <= tol, "%s%s differs: relative error %.3g > %g" % (
            what, n, e, tol)


def shard(model, mesh=None, reshard=True, mp=None):
    kw = {"mesh": mesh, "reshard_after_forward": reshard}
    if mp is not None:
        kw["mp_policy"] = mp
    for b in model.blocks:
        tt.fully_shard(b, **kw)
    return tt.fully_shard(model, **kw)


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)


def ref_step(ref, opt, step, ndp, scale=1.0):
    """The reference's step on every dp rank's batch at once (float32)."""
    xs, ys = zip(*[batch(step, d) for d in range(ndp)])
    (mse(ref(torch.cat(xs)), torch.cat(ys)) * scale).backward()


def ref_step_mixed(ref, step, ndp, mp):
    """The reference's gradients under `mp`, as the units compute them:
    each rank's forward and backward in param_dtype on its own batch, the
    gradients cast to reduce_dtype, summed in rank order in float32,
    divided by the ranks and rounded to reduce_dtype once."""
    pdt = mp.param_dtype or torch.float32
    rdt = mp.reduce_dtype or pdt
    acc = None
    for d in range(ndp):
        low = copy.deepcopy(ref).to(pdt)
        x, y = batch(step, d)
        mse(low(x.to(pdt)), y).backward()
        g = [p.grad.to(rdt).float() for p in low.parameters()]
        acc = g if acc is None else [a + b for a, b in zip(acc, g)]
    for p, a in zip(ref.parameters(), acc):
        p.grad = (a / ndp).to(rdt).float()


def train(model, ref, dp_index, ndp, steps=STEPS, mp=None):
    opt, ropt = adamw(model.parameters()), adamw(ref.parameters())
    for s in range(steps):
        x, y = batch(s, dp_index)
        mse(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        if mp is None:
            ref_step(ref, ropt, s, ndp)
        else:
            ref_step_mixed(ref, s, ndp, mp)
        ropt.step()
        ropt.zero_grad()
    return opt


# ------------------------------------------------------------------ 1-D

@one_d
@pytest.mark.parametrize("reshard", [True, False])
def test_fully_shard_trains_like_one_process(reshard):
    model, ref = make(), make()
    shard(model, reshard=reshard)
    assert type(model).__name__ == "FSDPNet"
    assert isinstance(model.blocks[0], tt.FSDPModule)
    # what the optimizer sees: this rank's rows, as nn.Parameters
    assert_shards(model, ref, (SIZE, RANK), tol=0.0, what="before: ")
    assert all(isinstance(p, nn.Parameter) for p in model.parameters())
    train(model, ref, RANK, SIZE)
    assert_shards(model, ref, (SIZE, RANK))
    st = model.fsdp_stats()
    # 3 units: at True the blocks gather again for backward
    assert st["allgathers"] == (5 if reshard else 3)
    assert st["reduce_scatters"] == 3
    model.close()


MP = {"bf16": tt.MixedPrecisionPolicy(param_dtype=torch.bfloat16),
      "bf16-f32": tt.MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                          reduce_dtype=torch.float32),
      "f32-bf16": tt.MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)}


@one_d
@pytest.mark.parametrize("reshard", [True, False])
@pytest.mark.parametrize("policy", sorted(MP))
def test_mixed_precision_applies_the_casts(reshard, policy):
    mp = MP[policy]
    model, ref, f32 = make(), make(), make()
    shard(model, reshard=reshard, mp=mp)
    x, _ = batch(0, RANK)
    with torch.no_grad():
        out = model(x)
    assert out.dtype == (mp.param_dtype or torch.float32)
    train(model, ref, RANK, SIZE, mp=mp)
    assert_shards(model, ref, (SIZE, RANK))
    # the casts happened: float32 training ends elsewhere
    opt = adamw(f32.parameters())
    for s in range(STEPS):
        ref_step(f32, opt, s, SIZE)
        opt.step()
        opt.zero_grad()
    worst = max(rel_err(p, expected(q, n, (SIZE, RANK)))
                for (n, p), q in zip(model.named_parameters(),
                                     f32.parameters()) if p.numel())
    assert worst > 1e-4, "mixed precision trained like float32 (%.3g)" % worst
    model.close()


def fsdp2_policy_class():
    """torch's own MixedPrecisionPolicy (torch 2.6+), else one of the same
    name and fields as FSDP2 declares it."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy
        return MixedPrecisionPolicy
    except (ImportError, ValueError):  # 1.13 on Python 3.11: ValueError
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class MixedPrecisionPolicy:
            param_dtype: object = None
            reduce_dtype: object = None
            output_dtype: object = None
            cast_forward_inputs: bool = True
        return MixedPrecisionPolicy


@one_d
def test_torch_s_own_mixed_precision_policy_is_taken():
    """Code written for torch's fully_shard passes torch's policy."""
    mp = fsdp2_policy_class()(param_dtype=torch.bfloat16,
                              reduce_dtype=torch.float32)
    model, ref = make(), make()
    shard(model, mp=mp)
    assert model._tpdp_fsdp._policy == MP["bf16-f32"]
    x, _ = batch(0, RANK)
    with torch.no_grad():
        assert model(x).dtype == torch.bfloat16
    train(model, ref, RANK, SIZE, steps=3, mp=MP["bf16-f32"])
    assert_shards(model, ref, (SIZE, RANK))
    model.close()


@one_d
@pytest.mark.parametrize("reshard", [True, False])
def test_gradient_accumulation_over_three_micro_batches(reshard):
    model, ref = make(), make()
    shard(model, reshard=reshard)
    opt, ropt = adamw(model.parameters()), adamw(ref.parameters())
    for s in range(4):
        for k in range(3):
            model.set_requires_gradient_sync(k == 2)
            x, y = batch(10 * s + k, RANK)
            (mse(model(x), y) / 3).backward()
            if k < 2:  # nothing reduced yet: no gradient to see
                assert all(p.grad is None for p in model.parameters())
            ref_step(ref, ropt, 10 * s + k, SIZE, scale=1 / 3)
        opt.step()
        opt.zero_grad()
        ropt.step()
        ropt.zero_grad()
    assert_shards(model, ref, (SIZE, RANK))
    # with sync off, the ranks reduced nothing: 3 units, one reduce-scatter
    # each per step
    assert model.fsdp_stats()["reduce_scatters"] == 3
    model.close()


@one_d
@pytest.mark.parametrize("zero", ["zeros", "none", "user"])
def test_gradients_add_up_across_backwards(zero):
    # FSDP2 adds each backward's mean to p.grad: two backwards without
    # zero_grad give the sum, as torch's autograd does on the reference
    model, ref = make(), make()
    shard(model)
    for s in range(2):
        x, y = batch(s, RANK)
        mse(model(x), y).backward()
        ref_step(ref, None, s, SIZE)
    got = dict(model.named_parameters())
    for n, q in ref.named_parameters():
        assert rel_err(got[n].grad, expected(q.grad, n, (SIZE, RANK))) <= \
            TOL, n
    # zeroed in place, set to None, or a tensor of the user's: the next
    # mean lands on it
    opt = adamw(model.parameters())
    if zero == "user":
        for p in model.parameters():
            p.grad = torch.full_like(p, 0.5)
    else:
        opt.zero_grad(set_to_none=zero == "none")
    x, y = batch(5, RANK)
    mse(model(x), y).backward()
    ref.zero_grad()
    ref_step(ref, None, 5, SIZE)
    for n, q in ref.named_parameters():
        want = expected(q.grad, n, (SIZE, RANK))
        if zero == "user":
            want = want + 0.5
        assert rel_err(got[n].grad, want) <= TOL, n
    model.close()


@one_d
def test_forward_that_raises_leaves_the_units_usable():
    model, ref = make(), make()
    shard(model)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        model(torch.zeros(2, D_IN + 1))  # inside the root's forward
    with pytest.raises(RuntimeError, match="normalized_shape"):
        model.blocks[1](torch.zeros(2, H + 1))  # inside a block's
    train(model, ref, RANK, SIZE, steps=3)
    assert_shards(model, ref, (SIZE, RANK))
    model.close()


@one_d
def test_unshard_and_reshard():
    model, ref = make(), make()
    shard(model)
    blk = model.blocks[1]
    blk.unshard()
    for (n, p), q in zip(blk.named_parameters(),
                         ref.blocks[1].parameters()):
        assert p.shape == q.shape and torch.equal(p, q), n
    blk.reshard()
    assert blk.fc1.weight.shape[0] == len(range(*chunk_range(F, SIZE, RANK)))
    h = blk.unshard(async_op=True)
    h.wait()
    assert blk.fc1.weight.shape == (F, H)
    # the forward finds the block gathered; training goes on as usual
    train(model, ref, RANK, SIZE, steps=2)
    assert_shards(model, ref, (SIZE, RANK))
    model.close()


@one_d
def test_forward_without_backward_frees_its_activations():
    """A forward under grad that no backward follows (an evaluation that
    forgot no_grad, a step given up): once its output is dropped, what
    autograd saved is freed, with no collection needed - tanh's 64 MiB
    output, which its own backward node saves, included (a saved-tensor
    hook that kept the tensor itself would tie it to its node in a cycle
    that Python's collector cannot see). Measured as RSS: glibc gives a
    block this large its own mapping and unmaps it when it is freed."""
    if "TPDP_TEST_PRELOADED" in os.environ:
        pytest.skip("under ASan malloc is the sanitizer's, not glibc's")
    rows = 4096
    model = nn.Sequential(nn.Linear(D_IN, rows), nn.Tanh(),
                          nn.Linear(rows, OUT))
    tt.fully_shard(model)
    x = torch.randn(rows, D_IN)
    before = _rss_bytes()
    out = model(x)
    during = _rss_bytes()
    del out
    gc.collect()
    after = _rss_bytes()
    assert during - before >= 48 << 20, "the forward took %d MiB" % (
        (during - before) >> 20)
    assert after - before <= 16 << 20, (
        "RSS %d -> %d -> %d MiB: tanh's output outlived the forward's graph"
        % (before >> 20, during >> 20, after >> 20))
    mse(model(x), torch.zeros(rows, OUT)).backward()  # and it trains on
    model.close()


@one_d
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_evaluation_forward_then_training(mode):
    """An evaluation forward (the units' first gather) under no_grad or
    inference_mode, then training. Under inference_mode the views of C
    memory the parameters then take are kept for later steps, and must not
    be inference tensors, which autograd cannot save; a close() inside it
    leaves parameters that train."""
    evaluation = getattr(torch, mode)
    model, ref = make(), make()
    shard(model)
    x, _ = batch(0, RANK)
    with evaluation():
        got = model(x)
        want = ref(x)
    assert rel_err(got, want) <= 1e-6
    train(model, ref, RANK, SIZE, steps=3)
    assert_shards(model, ref, (SIZE, RANK))
    with evaluation():
        model.close()
    assert not any(p.is_inference() for p in model.parameters())
    opt = adamw(model.parameters())
    sum((p ** 2).sum() for p in model.parameters()).backward()  # saves p
    opt.step()


class CheckpointedBlocks(Net):
    """Net with activation checkpointing (torch.utils.checkpoint) inside
    each block's forward (`inside`: torchtitan's order, the block
    checkpoint-wrapped, then fully sharded) or around each block's call."""

    def __init__(self, where, reentrant):
        super().__init__()
        self.where, self.reentrant = where, reentrant
        if where == "inside":
            for b in self.blocks:
                b.forward = self.checkpointed(b.forward)

    def checkpointed(self, fn):
        from torch.utils.checkpoint import checkpoint
        return lambda x: checkpoint(fn, x, use_reentrant=self.reentrant)

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = self.checkpointed(b)(h) if self.where == "around" else b(h)
        return self.out(h)


def checkpointed_make(where, reentrant):
    torch.manual_seed(3)  # make()'s values
    return CheckpointedBlocks(where, reentrant)


@one_d
@pytest.mark.parametrize("where,reentrant", [
    ("inside", True), ("inside", False), ("around", True)])
def test_activation_checkpointing_trains_like_one_process(where, reentrant):
    """Recomputation inside a unit's forward (both kinds), and reentrant
    checkpointing around a unit (its forward first runs without grad, then
    again with grad inside backward), against the module without it."""
    model, ref = checkpointed_make(where, reentrant), make()
    shard(model)
    train(model, ref, RANK, SIZE, steps=3)
    assert_shards(model, ref, (SIZE, RANK))
    model.close()


@one_d
def test_non_reentrant_checkpointing_around_a_unit_is_refused():
    """Non-reentrant recomputation around a unit runs its forward again in
    the middle of its own backward, while it is gathered for it: refused,
    on every rank, at that backward."""
    model = checkpointed_make("around", False)
    shard(model)
    x, y = batch(0, RANK)
    with pytest.raises(RuntimeError, match="a second forward during "
                       "backward, e.g. activation recomputation, is not "
                       "supported"):
        mse(model(x), y).backward()
    model.close()


@one_d
def test_close_keeps_the_shards_and_refuses_the_forward():
    model, ref = make(), make()
    shard(model)
    train(model, ref, RANK, SIZE, steps=2)
    shards = {n: (p.detach().clone(), p.grad.clone())
              for n, p in model.named_parameters()}
    model.blocks[0].close()  # one unit closes its whole tree
    assert model.blocks[1]._tpdp_fsdp.closed
    model.close()  # again: nothing
    for n, p in model.named_parameters():
        assert torch.equal(p, shards[n][0]) and \
            torch.equal(p.grad, shards[n][1]), n
    with pytest.raises(tt.TpdpError, match="fully_shard unit #.* is closed "
                       r"\(fully_shard unit #") as e:
        model(batch(0, RANK)[0])
    assert e.value.status == "TPDP_ERR_STATE"
    with pytest.raises(tt.TpdpError, match="was fully sharded by .*, which "
                       "is closed"):
        tt.fully_shard(model.blocks[0])


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@one_d
@pytest.mark.parametrize("mib", [0, 16])
def test_backward_gives_free_heap_memory_back(monkeypatch, mib):
    """TPDP_HEAP_TRIM_MIB: after a CPU unit's post-backward, free heap
    chunks beyond that many MiB go back to the OS (RSS falls by them); 0
    keeps them. The free chunks are made here with libc's malloc: 128 MiB
    in 64 KiB blocks, each written, every other one freed (the others stay,
    so that the free ones cannot merge into the heap's top, which free()
    gives back by itself)."""
    if "TPDP_TEST_PRELOADED" in os.environ:
        pytest.skip("under ASan malloc is the sanitizer's, not glibc's heap")
    if _heap.free_heap_bytes() is None:
        pytest.skip("glibc without mallinfo2 (< 2.33): the trim is off")
    monkeypatch.setenv("TPDP_HEAP_TRIM_MIB", str(mib))
    model = shard(make())
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [
        ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    x, y = batch(0, RANK)
    loss = mse(model(x), y)
    blocks = []
    for _ in range(2048):
        blocks.append(libc.malloc(64 << 10))
        ctypes.memset(blocks[-1], 1, 64 << 10)
    pins = blocks[1::2]
    for b in blocks[0::2]:
        libc.free(b)
    try:
        before = _rss_bytes()
        assert _heap.free_heap_bytes() >= 64 << 20
        loss.backward()
        after = _rss_bytes()
    finally:
        for b in pins:
            libc.free(b)
    if mib:
        assert before - after >= 48 << 20, (
            "RSS %d MiB -> %d MiB: the 64 MiB of free heap chunks stayed"
            % (before >> 20, after >> 20))
    else:
        assert after > before - (16 << 20), (
            "RSS %d MiB -> %d MiB with the trim off" % (before >> 20,
                                                       after >> 20))
    model.close()


@one_d
def test_heap_is_trimmed_once_a_backward_before_the_root_s_part(monkeypatch):
    """The trim runs once per backward: after the last block's
    post-backward (both blocks done, the root's backward still running:
    its embedding gradients, the peak, come after); a model of one unit
    trims when its backward ends."""
    model = shard(make())
    units = [model.blocks[0]._tpdp_fsdp, model.blocks[1]._tpdp_fsdp,
             model._tpdp_fsdp]
    seen = []
    monkeypatch.setattr(_heap, "trim_if_large",
                        lambda th: seen.append([u._state for u in units]))
    for s in range(2):
        x, y = batch(s, RANK)
        mse(model(x), y).backward()
    done, running = "BACKWARD_POST", "BACKWARD_PRE"
    assert seen == [[done, done, running]] * 2
    model.close()
    one = tt.fully_shard(nn.Linear(D_IN, OUT))
    seen.clear()
    x, y = batch(0, RANK)
    mse(one(x), y).backward()
    assert len(seen) == 1
    one.close()


@one_d
def test_close_frees_each_unit_as_it_copies_it_out(monkeypatch):
    """close() copies a unit's shards out and frees that unit's memory
    (tpdp_fsdp_release) before it goes on to the next, so that the copies
    never coexist with every unit's memory; mid-step the units' memory
    stays until the tree goes (nothing is freed under a step)."""
    if not _lib.has("tpdp_fsdp_release"):
        pytest.skip("libtpdp older than 0.3 (no tpdp_fsdp_release)")
    real = _lib.lib.tpdp_fsdp_release
    freed = []

    def spy(cunit):
        st = real(cunit)
        freed.append(st)
        return st
    monkeypatch.setattr(_lib.lib, "tpdp_fsdp_release", spy)
    model, ref = make(), make()
    shard(model)
    train(model, ref, RANK, SIZE, steps=2)
    model.close()
    assert freed == [0, 0, 0]  # both blocks and the root, each freed
    assert_shards(model, ref, (SIZE, RANK))  # the copies hold the values
    freed.clear()
    model = make()
    shard(model)
    x, y = batch(0, RANK)
    loss = mse(model(x), y)  # mid-step: the root is still gathered
    model.close()
    assert 0 not in freed
    del loss


@one_d
def test_bad_heap_trim_setting_is_refused_before_any_change(monkeypatch):
    monkeypatch.setenv("TPDP_HEAP_TRIM_MIB", "lots")
    model = make()
    before = [p for p in model.parameters()]
    with pytest.raises(_lib.TpdpError) as e:
        shard(model)
    assert e.value.status == "TPDP_ERR_INVALID_ARGUMENT"
    assert "TPDP_HEAP_TRIM_MIB='lots'" in e.value.message
    assert all(a is b for a, b in zip(model.parameters(), before))
    assert type(model.blocks[0]) is Block  # not made an FSDP class


@one_d
def test_dropped_model_is_collected_at_once():
    model = make()
    shard(model)
    x, y = batch(0, RANK)
    mse(model(x), y).backward()
    unit = weakref.ref(model._tpdp_fsdp)
    gc.disable()
    try:
        del model
        assert unit() is None  # no reference cycle keeps it
    finally:
        gc.enable()
    # a fresh one trains
    model, ref = make(), make()
    shard(model)
    train(model, ref, RANK, SIZE, steps=2)
    assert_shards(model, ref, (SIZE, RANK))
    model.close()


# ---------------------------------------------------------- 2-D and 3-D

@one_d
def test_2d_mesh_of_one_replica_is_fsdp_over_the_shards(monkeypatch):
    """Also without numpy (torch 2.x's wheels do not bring it along): the
    mesh, the units' agreement and training never call Tensor.numpy()."""
    def no_numpy(self, *args, **kwargs):
        raise RuntimeError("Numpy is not available")
    monkeypatch.setattr(torch.Tensor, "numpy", no_numpy)
    mesh = tt.init_device_mesh("cpu", (1, SIZE), mesh_dim_names=(
        "dp_replicate", "dp_shard"))
    model, ref = make(), make()
    shard(model, mesh=mesh)
    train(model, ref, RANK, SIZE, steps=3)
    assert_shards(model, ref, (SIZE, RANK))
    model.close()
    mesh.close()


@pytest.mark.skipif(SIZE != 4, reason="the 2x2 meshes need 4 ranks")
@needs_hsdp
@pytest.mark.parametrize("reshard", [True, False])
def test_hsdp_2x2_trains_like_one_process(reshard):
    mesh = tt.init_device_mesh("cpu", (2, 2), mesh_dim_names=(
        "dp_replicate", "dp_shard"))
    r, s = mesh.get_local_rank("dp_replicate"), \
        mesh.get_local_rank("dp_shard")
    model, ref = make(), make()
    shard(model, mesh=mesh, reshard=reshard)
    train(model, ref, r * 2 + s, 4)
    assert_shards(model, ref, (2, s))  # sharded over dp_shard only
    # one all-reduce over dp_replicate per unit (the blocks, the root), of
    # its padded float32 shard: ceil(dim 0 / 2) rows of each parameter
    st = model.fsdp_stats()
    assert st["allreduces"] == 3, st
    padded = sum(-(-q.shape[0] // 2) * q[0].numel()
                 for q in ref.parameters())
    assert st["bytes_allreduced"] == 4 * padded, st
    model.close()
    mesh.close()


@pytest.mark.skipif(SIZE != 4, reason="the 2x2 meshes need 4 ranks")
@pytest.mark.parametrize("reshard", [True, False])
def test_tp_then_fully_shard_2x2_trains_like_one_process(reshard):
    mesh = tt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    d, t = mesh.get_local_rank("dp"), mesh.get_local_rank("tp")
    model, ref = make(), make()
    tt.parallelize_module(model, mesh["tp"],
                          {k: v() for k, v in TP_PLAN.items()})
    shard(model, mesh=mesh["dp"], reshard=reshard)
    train(model, ref, d, 2)
    assert_shards(model, ref, (2, d), (2, t))
    model.close()
    mesh.close()


@pytest.mark.skipif(SIZE != 8, reason="the 3-D mesh needs 8 ranks")
@needs_hsdp
def test_3d_dp_replicate_dp_shard_tp_2x2x2_trains_like_one_process():
    mesh = tt.init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=(
        "dp_replicate", "dp_shard", "tp"))
    r, s, t = (mesh.get_local_rank(n) for n in mesh.mesh_dim_names)
    model, ref = make(), make()
    tt.parallelize_module(model, mesh["tp"],
                          {k: v() for k, v in TP_PLAN.items()})
    shard(model, mesh=mesh["dp_replicate", "dp_shard"])
    train(model, ref, r * 2 + s, 4)
    assert_shards(model, ref, (2, s), (2, t))
    model.close()
    mesh.close()


@pytest.mark.skipif(SIZE != 8, reason="the 3-D mesh needs 8 ranks")
def test_3d_mesh_slices():
    mesh = tt.init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=(
        "dp_replicate", "dp_shard", "tp"))
    dp = mesh["dp_replicate", "dp_shard"]
    assert dp.ndim == 2 and dp.size() == 4
    assert dp.mesh_dim_names == ("dp_replicate", "dp_shard")
    assert dp["dp_shard"] is mesh["dp_shard"]
    coords = [(RANK // 4) % 2, (RANK // 2) % 2, RANK % 2]
    assert [mesh.get_local_rank(n) for n in mesh.mesh_dim_names] == coords
    assert dp.get_local_rank("dp_shard") == coords[1]
    t = torch.ones(1) * RANK
    tt.all_reduce(t, mesh["dp_shard"])
    # the ranks that differ only in dp_shard: rank and rank +- 2
    assert t.item() == RANK + (RANK + 2 if coords[1] == 0 else RANK - 2)
    with pytest.raises(KeyError, match="in the mesh's order"):
        mesh["dp_shard", "dp_replicate"]
    mesh.close()
    assert dp.closed
