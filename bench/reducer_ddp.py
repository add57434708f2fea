#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""PyTorch DDP baseline for bench/reducer.sh (Debian's python3-torch, CPU, gloo).

Two processes (torch.multiprocessing, env:// rendezvous on 127.0.0.1). The
model has 100 parameter tensors of 250k f32 elements (25M parameters); its
loss is the sum of every parameter's sum, so backward only writes each
gradient (a broadcast of ones) and the step time is dominated by DDP's
gradient synchronisation. DDP uses the same bucketing as tpdp (first bucket
1 MiB, cap 25 MiB) and gradient_as_bucket_view=True.

A step = zero_grad + forward + backward (+ DDP's bucketed allreduce). The
sync cost is the median step time minus the median step time of the same
step under ddp.no_sync() (measured alternately in the same run).
Prints on rank 0: "ddp_sync_step_ms X ddp_nosync_step_ms Y ddp_sync_ms Z".
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

NT = 100
NUMEL = 250_000


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ps = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros(NUMEL)) for _ in range(NT)])

    def forward(self):
        return torch.stack([p.sum() for p in self.ps]).sum()


def step(ddp, sync):
    for p in ddp.parameters():
        if p.grad is not None:
            p.grad.zero_()
    if sync:
        ddp().backward()
    else:
        with ddp.no_sync():
            ddp().backward()


def worker(rank, world, steps, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ddp = torch.nn.parallel.DistributedDataParallel(
        Model(), bucket_cap_mb=25, gradient_as_bucket_view=True)
    for _ in range(2):  # warm-up (DDP rebuilds its buckets after the first)
        step(ddp, True)
        step(ddp, False)
    t_sync, t_nosync = [], []
    for _ in range(steps):
        dist.barrier()
        t0 = time.perf_counter()
        step(ddp, True)
        t_sync.append(time.perf_counter() - t0)
        dist.barrier()
        t0 = time.perf_counter()
        step(ddp, False)
        t_nosync.append(time.perf_counter() - t0)
    s = torch.tensor([statistics.median(t_sync), statistics.median(t_nosync)],
                     dtype=torch.float64)
    dist.all_reduce(s, op=dist.ReduceOp.MAX)
    if rank == 0:
        queue.put((s[0].item() * 1e3, s[1].item() * 1e3))
    dist.destroy_process_group()


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    port = 29500 + os.getpid() % 1000
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=(r, 2, steps, port, queue))
             for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        print("reducer_ddp: a worker failed", file=sys.stderr)
        return 1
    sync_ms, nosync_ms = queue.get()
    print("ddp_sync_step_ms %.2f ddp_nosync_step_ms %.2f ddp_sync_ms %.2f"
          % (sync_ms, nosync_ms, sync_ms - nosync_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
