#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""GPT-2 in plain PyTorch, trained with tpdp.torch's tensor parallelism
(--tp) inside its data parallelism (--dp: DistributedDataParallel, or with
--fsdp fully_shard on each block and the root; --dp-replicate R: HSDP, R
replicas of dp/R shards): run as
    mpirun -np 4 python3 examples/torch/train_gpt2.py --dp 2 --tp 2 \\
        --data tokens.bin [--model DIR] [--fsdp] [--check]
It reads what examples/train_gpt2 reads: an llm.c token file and, with
--model, Hugging Face's config.json + model.safetensors (f32, f16 or bf16,
with or without the "transformer." prefix). It prints `step <i> loss <v>`;
--check also trains the unparallelized model on the whole batch in each
process and prints `check: max_rel_loss_diff <x>` (exit 1 above 1e-4);
--report prints the median step time and each rank's peak RSS.

TP layout (Megatron's): the q, k, v and fc projections column-parallel,
the attention and MLP output projections row-parallel, the token embedding
vocabulary-parallel with the tied lm_head column-parallel over the same
rows. The heads must divide by --tp.
"""
import argparse
import json
import math
import os
import resource
import statistics
import struct
import sys
import time

if __name__ == "__main__":
    # OpenBLAS's widest kernels for this CPU: decided before torch loads
    # OpenBLAS (may restart this script once, before MPI starts).
    import openblas_core
    openblas_core.choose_core()

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, C, H, inner):
        super().__init__()
        self.head_dim = C // H
        self.ln_1 = nn.LayerNorm(C)
        self.q, self.k, self.v = (nn.Linear(C, C) for _ in range(3))
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, inner)
        self.mlp_proj = nn.Linear(inner, C)

    def forward(self, x):
        B, T, _ = x.shape
        a = self.ln_1(x)
        # under TP each projection holds this rank's heads
        q, k, v = (m(a).view(B, T, -1, self.head_dim).transpose(1, 2)
                   for m in (self.q, self.k, self.v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + self.attn_proj(y)
        h = F.gelu(self.fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp_proj(h)


class GPT2(nn.Module):
    def __init__(self, layers, C, H, vocab, positions, inner=None):
        super().__init__()
        self.wte = nn.Embedding(vocab, C)
        self.wpe = nn.Embedding(positions, C)
        self.h = nn.ModuleList(Block(C, H, inner or 4 * C)
                               for _ in range(layers))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               targets.reshape(-1))


# ------------------------------------------------------------------ files

_ST_DTYPES = {"F32": torch.float32, "F16": torch.float16,
              "BF16": torch.bfloat16}
_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def read_safetensors(path):
    """name -> f32 tensor of every floating-point tensor in the file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] not in _ST_DTYPES:
            continue
        lo, hi = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[lo:hi]),
                             dtype=_ST_DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).float()
    return out


def load_hf(model_dir):
    """A GPT2 with Hugging Face GPT-2's config and weights (Conv1D weights
    are [in, out]: transposed into nn.Linear's [out, in])."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    C = cfg["n_embd"]
    model = GPT2(cfg["n_layer"], C, cfg["n_head"], cfg["vocab_size"],
                 cfg["n_positions"], cfg.get("n_inner"))
    w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    w = {k[len("transformer."):] if k.startswith("transformer.") else k: v
         for k, v in w.items()}
    p = dict(model.named_parameters())
    with torch.no_grad():
        for name in ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"):
            p[name].copy_(w[name])
        for i in range(cfg["n_layer"]):
            h = "h.%d." % i
            for ln in ("ln_1", "ln_2"):
                for s in ("weight", "bias"):
                    p[h + ln + "." + s].copy_(w[h + ln + "." + s])
            qkv_w, qkv_b = w[h + "attn.c_attn.weight"], w[h + "attn.c_attn.bias"]
            for j, m in enumerate("qkv"):
                p[h + m + ".weight"].copy_(qkv_w[:, j * C:(j + 1) * C].t())
                p[h + m + ".bias"].copy_(qkv_b[j * C:(j + 1) * C])
            for ours, theirs in (("attn_proj", "attn.c_proj"), ("fc", "mlp.c_fc"),
                                 ("mlp_proj", "mlp.c_proj")):
                p[h + ours + ".weight"].copy_(w[h + theirs + ".weight"].t())
                p[h + ours + ".bias"].copy_(w[h + theirs + ".bias"])
    return model


def read_tokens(path):
    """The tokens of an llm.c token file (header: 256 int32, magic
    20240520, version 1, count; then uint16 tokens)."""
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] != 20240520 or header[1] != 1:
            raise ValueError("%s: not an llm.c token file (magic %d, version "
                             "%d)" % (path, header[0], header[1]))
        raw = f.read(2 * header[2])
    if len(raw) != 2 * header[2]:
        raise ValueError("%s: %d tokens announced, %d present"
                         % (path, header[2], len(raw) // 2))
    return torch.frombuffer(bytearray(raw), dtype=torch.int16).long() & 0xFFFF


def batch(tokens, step, B, T):
    """Step `step`'s B rows of T+1 consecutive tokens, llm.c's loader
    order, wrapping at the end of the file."""
    n = tokens.numel()
    rows = []
    for b in range(B):
        start = ((step * B + b) * T) % max(1, n - T - 1)
        rows.append(tokens[start:start + T + 1])
    x = torch.stack(rows)
    return x[:, :-1], x[:, 1:]


# ------------------------------------------------------------- training

def tp_plan(model):
    import tpdp.torch as tt
    plan = {"wte": tt.RowwiseParallel(),
            "lm_head": tt.ColwiseParallel(output_layouts=tt.Replicate())}
    for i in range(len(model.h)):
        h = "h.%d." % i
        for m in ("q", "k", "v", "fc"):
            plan[h + m] = tt.ColwiseParallel()
        plan[h + "attn_proj"] = tt.RowwiseParallel()
        plan[h + "mlp_proj"] = tt.RowwiseParallel()
    return plan


def report(tt, times):
    """Rank 0 prints the median step time (step 0, the warm-up, left out;
    the slowest rank's) and every rank's peak RSS."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    n = tt.world_size()
    per = torch.zeros(n, dtype=torch.float64)
    per[tt.rank()] = rss
    world = tt.init_device_mesh("cpu", (n,), mesh_dim_names=("world",))
    tt.all_reduce(per, world["world"])
    ms = torch.tensor([statistics.median(times[1:] or times) * 1e3])
    tt.all_reduce(ms, world["world"], "max")
    world.close()
    if tt.rank() == 0:
        print("throughput: %.1f ms/step" % ms.item())
        print("peak memory: " + ", ".join("rank %d %.1f MiB" % (r, m)
                                          for r, m in enumerate(per.tolist())),
              flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--model")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--positions", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--fsdp", action="store_true",
                    help="fully_shard each block and the root over the dp "
                    "ranks (else DistributedDataParallel)")
    ap.add_argument("--dp-replicate", type=int, default=1,
                    help="with --fsdp: HSDP, R replicas of --dp / R shards")
    ap.add_argument("--param-dtype", choices=sorted(_DTYPES), default="f32",
                    help="with --fsdp: the dtype the units gather and the "
                    "model computes in (the f32 shards stay the master)")
    ap.add_argument("--reduce-dtype", choices=sorted(_DTYPES),
                    help="with --fsdp: the reduce-scatter's dtype (default: "
                    "--param-dtype's)")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--report", action="store_true",
                    help="print the median step time and the peak RSS")
    a = ap.parse_args(argv)
    import tpdp.torch as tt
    torch.set_num_threads(1)
    if a.dp * a.tp != tt.world_size():
        raise SystemExit("train_gpt2.py: --dp %d x --tp %d is not the %d "
                         "ranks" % (a.dp, a.tp, tt.world_size()))
    if a.batch % a.dp:
        raise SystemExit("train_gpt2.py: --batch %d does not divide by --dp"
                         " %d" % (a.batch, a.dp))
    if a.dp_replicate < 1 or a.dp % a.dp_replicate:
        raise SystemExit("train_gpt2.py: --dp-replicate %d does not divide "
                         "--dp %d" % (a.dp_replicate, a.dp))
    if a.dp_replicate > 1 and not a.fsdp:
        raise SystemExit("train_gpt2.py: --dp-replicate needs --fsdp")
    if (a.param_dtype != "f32" or a.reduce_dtype) and not a.fsdp:
        raise SystemExit("train_gpt2.py: --param-dtype and --reduce-dtype "
                         "need --fsdp")
    if a.param_dtype != "f32" and a.check:
        raise SystemExit("train_gpt2.py: --check compares with float32 "
                         "training: it needs --param-dtype f32")

    def build():
        torch.manual_seed(a.seed)
        if a.model:
            return load_hf(a.model)
        return GPT2(a.layers, a.embd, a.heads, a.vocab, a.positions)

    model = build()
    if model.h[0].q.out_features // model.h[0].head_dim % a.tp:
        raise SystemExit("train_gpt2.py: the heads do not divide by --tp %d"
                         % a.tp)
    R = a.dp_replicate
    if R > 1:  # torchtitan's 3-D mesh: replicas x shards x tp
        mesh = tt.init_device_mesh("cpu", (R, a.dp // R, a.tp),
                                   mesh_dim_names=("dp_replicate",
                                                   "dp_shard", "tp"))
        dp_mesh = mesh["dp_replicate", "dp_shard"]
        d = mesh.get_local_rank("dp_replicate") * (a.dp // R) + \
            mesh.get_local_rank("dp_shard")
        dp_dims = ("dp_shard", "dp_replicate")
    else:
        mesh = tt.init_device_mesh("cpu", (a.dp, a.tp),
                                   mesh_dim_names=("dp", "tp"))
        dp_mesh = mesh["dp"]
        d = mesh.get_local_rank("dp")
        dp_dims = ("dp",)
    tt.parallelize_module(model, mesh["tp"], tp_plan(model))
    model.lm_head.weight = model.wte.weight  # the same vocabulary rows
    if a.fsdp:  # each block a unit, the root (embeddings, head) the last
        mp = tt.MixedPrecisionPolicy(
            param_dtype=_DTYPES[a.param_dtype],
            reduce_dtype=_DTYPES[a.reduce_dtype or a.param_dtype])
        for block in model.h:
            tt.fully_shard(block, mesh=dp_mesh, mp_policy=mp)
        ddp = tt.fully_shard(model, mesh=dp_mesh, mp_policy=mp)
    else:
        ddp = tt.DistributedDataParallel(model, device_mesh=dp_mesh)
    opt = torch.optim.AdamW(ddp.parameters(), lr=a.lr, betas=(0.9, 0.95),
                            eps=1e-8, weight_decay=0.0)
    ref = build() if a.check else None
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=a.lr, betas=(0.9, 0.95),
                                eps=1e-8, weight_decay=0.0) if a.check else None
    tokens = read_tokens(a.data)
    per = a.batch // a.dp
    if tt.rank() == 0 and __name__ == "__main__":
        import openblas_core
        kernels = openblas_core.describe()
        if kernels:
            print("openblas: " + kernels, flush=True)
    losses, worst, times = [], 0.0, []
    for step in range(a.steps):
        t0 = time.perf_counter()
        x, y = batch(tokens, step, a.batch, a.seq)
        loss = ddp(x[d * per:(d + 1) * per], y[d * per:(d + 1) * per])
        loss.backward()
        opt.step()
        opt.zero_grad()
        mean = loss.detach().clone().reshape(1)
        for dim in dp_dims:  # the mean over dp (equal sizes: of means)
            tt.all_reduce(mean, mesh[dim], "avg")
        mean = mean.item()
        times.append(time.perf_counter() - t0)
        losses.append(mean)
        if tt.rank() == 0:
            print("step %d loss %.6f" % (step, mean), flush=True)
        if ref is not None:
            ref_loss = ref(x, y)
            ref_loss.backward()
            ref_opt.step()
            ref_opt.zero_grad()
            worst = max(worst, abs(mean - ref_loss.item()) /
                        max(abs(ref_loss.item()), 1e-12))
    ddp.close()
    if a.report:
        report(tt, times)
    if a.check:
        if tt.rank() == 0:
            print("check: max_rel_loss_diff %.3g" % worst, flush=True)
        if worst > 1e-4:
            return 1, losses
    return 0, losses


if __name__ == "__main__":
    sys.exit(main()[0])
