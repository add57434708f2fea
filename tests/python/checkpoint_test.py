# SPDX-License-Identifier: BSD-3-Clause
"""tpdp.torch.checkpoint across meshes, wrappers and levels, in two phases
sharing a folder (tpdp_pytest_chain): "save" on 8 ranks trains fsdp_test's
model 3 AdamW steps as (dp_replicate, dp_shard, tp) = (2, 2, 2) (HSDP +
TP), as (dp_shard, tp) = (4, 2) (FSDP + TP) and as DDP over dp=4 with TP 2,
and saves model and optimizer; "load" on 4 ranks loads each into a model of
other initial values fully sharded over the 4 ranks ((1, 4, 1), the other
level: reshard_after_forward=False) and into the plain module on each rank
alone (no_dist), checks parameters, AdamW's moments and step and the
learning rate against the unwrapped module trained in one process on every
rank's batch, trains 2 steps more on both and compares again (1e-4);
`tpdp ckpt consolidate` of each gives a safetensors file of the
reference's tensors (no optimizer state)."""
import os
import subprocess
import sys

import pytest
import torch

import tpdp.torch as tt
from conftest import rel_err
from fsdp_test import (HSDP, TP_PLAN, adamw, batch, expected, make, mse,
                       ref_step, shard)

sys.path.insert(0, os.path.join(os.getcwd(), "examples", "torch"))
import train_gpt2 as ex  # noqa: E402 - its safetensors reader

RANK, SIZE = tt.rank(), tt.world_size()
PHASE = os.environ.get("TPDP_TEST_PHASE", "")
DIR = os.environ.get("TPDP_TEST_DIR", "")
TOL = 1e-4
BEFORE, AFTER = 3, 2  # steps before the save, after the load
NDP = 4               # data-parallel ranks of every saved run
CASES = ["hsdp_tp_2x2x2", "fsdp_tp_4x2", "ddp_tp_4x2"]

pytestmark = pytest.mark.skipif(not DIR, reason="runs as the phases of "
                                "//tests/python:checkpoint_test")


def in_phase(name, ranks):
    if PHASE != name or SIZE != ranks:
        pytest.skip("phase %r on %d ranks" % (name, ranks))


def reference(steps):
    """The unwrapped module trained in one process on every dp rank's
    batch, and its optimizer."""
    ref = make()
    opt = adamw(ref.parameters())
    for s in range(steps):
        ref_step(ref, opt, s, NDP)
        opt.step()
        opt.zero_grad()
    return ref, opt


def step(model, opt, s, dp_index):
    x, y = batch(s, dp_index)
    mse(model(x), y).backward()
    opt.step()
    opt.zero_grad()


# ----------------------------------------------------------------- save

def build(case):
    """(model, dp index, what to close) of a saved case on 8 ranks."""
    model = make()
    if case == "hsdp_tp_2x2x2":
        mesh = tt.init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=(
            "dp_replicate", "dp_shard", "tp"))
        dp = mesh["dp_replicate", "dp_shard"]
        d = mesh.get_local_rank("dp_replicate") * 2 + \
            mesh.get_local_rank("dp_shard")
    else:
        mesh = tt.init_device_mesh("cpu", (4, 2), mesh_dim_names=("dp", "tp"))
        dp = mesh["dp"]
        d = mesh.get_local_rank("dp")
    tt.parallelize_module(model, mesh["tp"],
                          {k: v() for k, v in TP_PLAN.items()})
    if case.startswith("ddp"):
        return tt.DistributedDataParallel(model, device_mesh=dp), d, mesh
    shard(model, mesh=dp)
    return model, d, mesh


@pytest.mark.parametrize("case", CASES)
def test_save(case):
    in_phase("save", 8)
    if case.startswith("hsdp") and not HSDP:
        pytest.skip("needs C HSDP (options v3)")
    model, d, mesh = build(case)
    opt = adamw(model.parameters())
    for s in range(BEFORE):
        step(model, opt, s, d)
    tt.checkpoint.save(os.path.join(DIR, case), model, opt,
                       metadata={"case": case})
    model.close()
    mesh.close()


# ----------------------------------------------------------------- load

def saved(case):
    path = os.path.join(DIR, case)
    if case.startswith("hsdp") and not HSDP:
        pytest.skip("needs C HSDP (options v3)")
    if not os.path.exists(os.path.join(path, "index.json")):
        pytest.skip("the save phase did not save %s (skipped there)" % case)
    return path


def assert_state(model, opt, ref, ropt, dp, what):
    """Parameters, AdamW's moments and step, the learning rate: this
    rank's rows (dp = (ranks, rank)) of the reference's."""
    got = dict(model.named_parameters())
    rstate = {n: ropt.state[q] for n, q in ref.named_parameters()}
    for n, q in ref.named_parameters():
        p = got[n]
        want = expected(q, n, dp)
        assert p.shape == want.shape, "%s: %s shape" % (what, n)
        assert rel_err(p, want) <= TOL, "%s: %s" % (what, n)
        st = opt.state[p]
        assert float(st["step"]) == float(rstate[n]["step"]), n
        for k in ("exp_avg", "exp_avg_sq"):
            w = expected(rstate[n][k], n, dp)
            assert rel_err(st[k], w) <= TOL, "%s: %s of %s" % (what, k, n)
    assert opt.param_groups[0]["lr"] == ropt.param_groups[0]["lr"]


@pytest.mark.parametrize("case", CASES)
def test_load_fully_sharded_on_4_ranks(case):
    in_phase("load", 4)
    path = saved(case)
    ref, ropt = reference(BEFORE)
    model = make(seed=99)  # other values: the load sets every one
    shard(model, reshard=False)
    opt = torch.optim.AdamW(model.parameters(), lr=0.5, weight_decay=0.01)
    tt.checkpoint.load(path, model, opt)
    assert_state(model, opt, ref, ropt, (SIZE, RANK), "loaded")
    for s in range(BEFORE, BEFORE + AFTER):
        step(model, opt, s, RANK)
        ref_step(ref, ropt, s, NDP)
        ropt.step()
        ropt.zero_grad()
    assert_state(model, opt, ref, ropt, (SIZE, RANK), "trained on")
    model.close()


def test_load_keeps_how_the_optimizer_runs():
    """The saved hyperparameters come back (lr); the entries that say how
    the loading optimizer runs (foreach here; fused, capturable and
    differentiable alike) stay as it set them."""
    in_phase("load", 4)
    path = saved(CASES[-1])
    model = make(seed=99)
    opt = torch.optim.AdamW(model.parameters(), lr=0.5, weight_decay=0.01,
                            foreach=True)
    tt.checkpoint.load(path, model, opt, no_dist=True)
    _, ropt = reference(BEFORE)
    assert opt.param_groups[0]["lr"] == ropt.param_groups[0]["lr"] != 0.5
    assert opt.param_groups[0]["foreach"] is True
    assert all(st["step"].dtype == torch.float32 and
               st["step"].device.type == "cpu" for st in opt.state.values())
    opt.zero_grad()
    mse(model(batch(0, 0)[0]), batch(0, 0)[1]).backward()
    opt.step()  # and AdamW's foreach path takes what was loaded


@pytest.mark.parametrize("case", CASES)
def test_load_on_one_process(case):
    in_phase("load", 4)
    path = saved(case)
    ref, ropt = reference(BEFORE)
    model = make(seed=99)
    opt = torch.optim.AdamW(model.parameters(), lr=0.5, weight_decay=0.01)
    tt.checkpoint.load(path, model, opt, no_dist=True)
    assert_state(model, opt, ref, ropt, (1, 0), "loaded")
    for s in range(BEFORE, BEFORE + AFTER):
        ref_step(model, opt, s, NDP)
        opt.step()
        opt.zero_grad()
        ref_step(ref, ropt, s, NDP)
        ropt.step()
        ropt.zero_grad()
    assert_state(model, opt, ref, ropt, (1, 0), "trained on")


@pytest.mark.parametrize("case", CASES)
def test_consolidate(case):
    in_phase("load", 4)
    path = saved(case)
    if RANK != 0:
        return
    if not os.environ.get("TPDP_CLI"):
        # scripts/torch-suites without Bazel's tools:tpdp (the GPU machine)
        pytest.skip("TPDP_CLI (the tpdp CLI, for ckpt consolidate) not set")
    out = os.path.join(DIR, case + ".safetensors")
    subprocess.run([os.environ["TPDP_CLI"], "ckpt", "consolidate", path, out],
                   check=True, capture_output=True)
    got = ex.read_safetensors(out)
    ref, _ = reference(BEFORE)
    want = dict(ref.named_parameters())
    assert sorted(got) == sorted(want)  # no optim.* in it
    for n, q in want.items():
        assert got[n].shape == q.shape and rel_err(got[n], q) <= TOL, n
