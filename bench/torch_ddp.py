#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""One rank of bench/torch_ddp.sh: the same 25M-parameter torch model's
training step (zero_grad, forward, backward) under torch's DDP (gloo) and
under tpdp.torch's DDP, in one run, the configurations' steps interleaved
(one step of each in turn, so that the machine's load falls on all alike).
Per configuration the median step time over the steps, max over the
ranks:
  plain       the module alone (no DDP)
  X_sync      DDP step
  X_nosync    the same under no_sync() (hooks run, nothing communicated)
sync = X_sync - X_nosync. The hook cost per parameter per step is measured
on a second model of many small parameters (200 Linear 8x8: 400 tensors),
where it is not lost in the noise of the large one's compute:
(hooks_tpdp_nosync - hooks_plain) / 400, in the calling thread's CPU time
(where a CPU backward and the hooks run), which time spent waiting for the
cores of a busy machine does not inflate. Rank 0 prints one line of fields.
Usage: torch_ddp.py STEPS"""
import statistics
import sys
import time

import torch
import torch.distributed as dist
from mpi4py import MPI
from torch import nn

import tpdp.torch as tt

WIDTH, LAYERS, BATCH = 1580, 10, 8  # 10 x 1580^2 + biases = 25.0M


def model():
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.Tanh()]
    return nn.Sequential(*layers)


def small_model():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(8, 8) for _ in range(200)])


def one_step(m, x, nosync):
    for p in m.parameters():
        if p.grad is not None:
            p.grad.zero_()
    if nosync is not None:
        with nosync():
            m(x).sum().backward()
    else:
        m(x).sum().backward()


def time_round_robin(configs, steps, width, clock=time.perf_counter):
    """{name: median ms, max over ranks}: the configurations' steps
    interleaved (one step of each in turn), so that a change in the
    machine's load falls on all of them alike."""
    x = torch.randn(BATCH, width)
    times = {name: [] for name, _, _ in configs}
    for i in range(steps + 2):
        for name, m, nosync in configs:
            MPI.COMM_WORLD.Barrier()
            t0 = clock()
            one_step(m, x, nosync)
            if i >= 2:
                times[name].append(clock() - t0)
    return {name: MPI.COMM_WORLD.allreduce(statistics.median(t),
                                           op=MPI.MAX) * 1e3
            for name, t in times.items()}


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    torch.set_num_threads(1)
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    port = MPI.COMM_WORLD.bcast(29611 if rank == 0 else None)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=size)
    plain = model()
    nparams = sum(1 for _ in plain.parameters())
    numel = sum(p.numel() for p in plain.parameters())
    ddp = nn.parallel.DistributedDataParallel(model(),
                                              gradient_as_bucket_view=True)
    ours = tt.DistributedDataParallel(model())
    r = time_round_robin([("plain", plain, None), ("torch_sync", ddp, None),
                          ("torch_nosync", ddp, ddp.no_sync),
                          ("tpdp_sync", ours, None),
                          ("tpdp_nosync", ours, ours.no_sync)], steps, WIDTH)
    ours.close()
    del ddp, ours, plain
    small, sddp = small_model(), nn.parallel.DistributedDataParallel(
        small_model())
    sours = tt.DistributedDataParallel(small_model())
    h = time_round_robin([("hooks_plain", small, None),
                          ("hooks_torch_nosync", sddp, sddp.no_sync),
                          ("hooks_tpdp_nosync", sours, sours.no_sync)],
                         30 * steps, 8, time.thread_time)
    sours.close()
    r.update(h)
    if rank == 0:
        print("params %d tensors %d ranks %d steps %d " % (
            numel, nparams, size, steps) + " ".join(
            "%s_ms %.3f" % kv for kv in r.items()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
