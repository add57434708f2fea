# SPDX-License-Identifier: BSD-3-Clause
"""train_gpt2 against PyTorch: a small GPT-2 (Hugging Face's definition,
written here in torch) is built from the same safetensors file that
train_gpt2 loads, trained with torch.optim.AdamW on the same llm.c token
file and batches, and the per-step losses must agree within 1e-4
(relative). Files: f32 with the "transformer." prefix, Hugging Face's mask
buffers and a tied lm_head.weight (1 rank; and dp=2, tp=2 with sequence
parallelism), bf16 without prefix (tp=2) and f16 (1 rank). n_head 3 and
vocab 259 do not divide by tp 2; the token file is short enough that the
loader wraps.

Mixed precision (--zero with --param-dtype/--reduce-dtype, dp=2): torch
applies the units' casts itself. Each step every dp rank's rows run apart
on the parameters rounded to param_dtype (computed in f32), each rank's
gradient is rounded to param_dtype, then to reduce_dtype, summed over the
ranks in rank order in f32, divided by dp and rounded to reduce_dtype once;
AdamW updates the f32 parameters with that mean. HSDP (--dp 4
--dp-replicate 2, at --zero 3 in bf16/bf16 and --zero 1 in bf16/f32): each
replica's mean over its 2 shards so, then the replicas' all-reduce in
reduce_dtype (the sum rounded to it, divided, rounded again). Those cases use TOL_CAST
(below), and fail if torch's losses with and without the casts are too
close to tell apart.

With --device cuda (scripts/gpu-check, on the lent GPU machine): PyTorch
on the GPU (TF32 off) against train_gpt2 --device cuda, one rank, the f32
and f16 files.

Usage: gpt2_torch_test.py TRAIN_GPT2_BINARY [--skip REASON | --device cuda]
"""
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_files as gf  # noqa: E402

L, C, H, V, P = 2, 12, 3, 259, 32
B, T, STEPS = 4, 8, 10
LR, WD, BETAS, EPS = 1e-3, 0.1, (0.9, 0.95), 1e-8
TOL = 1e-4
# Mixed precision: the casts move these small models' losses by only
# ~4e-5 (bf16 parameters), so those cases hold the closer agreement they
# reach (~3e-7, about the 6 printed decimals) within TOL_CAST, and torch's
# cast and uncast losses must differ by more than 10 TOL_CAST.
TOL_CAST = 3e-6


def torch_losses(params, tokens, device="cpu", clip=None, cast=None, dp=1,
                 rep=1):
    """Per-step losses; cast = (param_dtype, reduce_dtype) names applies the
    units' casts over dp ranks, in rep replicas (see the module's
    docstring)."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    if device == "cuda":  # strict FP32, as train_gpt2 without --tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    p = {n: torch.tensor(v, dtype=torch.float32, device=device).reshape(s)
         .requires_grad_() for n, (s, v) in params.items()}
    decay = [t for t in p.values() if t.dim() >= 2]
    no_decay = [t for t in p.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    hd = C // H
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=device))

    def forward(idx, tgt, p=p):
        B = idx.shape[0]
        x = p["wte.weight"][idx] + p["wpe.weight"][:T]
        for i in range(L):
            h = "h.%d." % i
            a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"],
                             1e-5)
            qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]
            q, k, v = qkv.split(C, dim=2)
            q, k, v = [t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v)]
            att = (q @ k.transpose(-2, -1)) / (hd ** 0.5)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
            m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"],
                             1e-5)
            m = F.gelu(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"],
                       approximate="tanh")
            x = x + m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
        x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
        logits = x @ p["wte.weight"].t()
        return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))

    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16,
              "f32": torch.float32}

    def cast_step(idx, tgt, cast, dp, rep):
        """The units' step: p.grad = the mean over dp ranks as they take it;
        returns the mean loss. HSDP (rep > 1 replicas of dp / rep shards,
        rank = replica * shards + shard): each replica's mean over its
        shards as above, then their all-reduce in reduce_dtype (MPI's sum,
        rounded to it at each addition, then divided and rounded again)."""
        pdt, rdt = dtypes[cast[0]], dtypes[cast[1]]
        rows, total, per_rank = B // dp, 0.0, []
        for r in range(dp):
            pc = {n: t.detach().to(pdt).float().requires_grad_()
                  for n, t in p.items()}
            loss = forward(idx[r * rows:(r + 1) * rows],
                           tgt[r * rows:(r + 1) * rows], pc)
            total += loss.item()
            g = torch.autograd.grad(loss, list(pc.values()))
            per_rank.append([x.to(pdt).to(rdt).float() for x in g])
        shards = dp // rep
        for k, t in enumerate(p.values()):
            means = []
            for c in range(rep):
                acc = per_rank[c * shards][k].clone()
                for r in range(c * shards + 1, (c + 1) * shards):
                    acc += per_rank[r][k]
                means.append((acc / shards).to(rdt).float())
            acc = means[0]
            for m in means[1:]:
                acc = (acc + m).to(rdt).float()
            t.grad = (acc / rep).to(rdt).float() if rep > 1 else acc
        return total / dp

    losses, pos = [], 0
    for _ in range(STEPS):
        if pos + B * T + 1 > len(tokens):  # llm.c's loader
            pos = 0
        buf = torch.tensor(tokens[pos:pos + B * T + 1], dtype=torch.long,
                           device=device)
        pos += B * T
        idx, tgt = buf[:-1].view(B, T), buf[1:].view(B, T)
        if cast is not None:
            losses.append(cast_step(idx, tgt, cast, dp, rep))
            opt.step()
            continue
        loss = forward(idx, tgt)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(list(p.values()), clip)
        opt.step()
    return losses


def run_gpt2(binary, model_dir, tokens_path, np, args):
    rc, out, err = gf.run_train(
        binary, ["--model", model_dir, "--data", tokens_path, "--batch",
                 str(B), "--seq", str(T), "--steps", str(STEPS), "--lr",
                 str(LR), "--weight-decay", str(WD), "--beta1", str(BETAS[0]),
                 "--beta2", str(BETAS[1]), "--eps", str(EPS), "--bucket-mib",
                 "0.001"] + args, np)
    losses = [float(m.group(2)) for m in
              re.finditer(r"^step (\d+) loss (\S+)(?: grad_norm .*)?$", out,
                          re.M)]
    return rc, losses, out + err


def main():
    binary = sys.argv[1]
    cases = [("f32_prefixed_1rank", "F32", "transformer.", True, 1, []),
             ("f32_prefixed_dp2_tp2_sp", "F32", "transformer.", True, 4,
              ["--dp", "2", "--tp", "2", "--sequence-parallel"]),
             ("bf16_tp2", "BF16", "", False, 2, ["--tp", "2"]),
             # --grad-clip against torch.nn.utils.clip_grad_norm_, on
             # fully sharded units over a 2x2 mesh and with the reducer
             ("f32_clip_dp2_tp2_zero3", "F32", "transformer.", True, 4,
              ["--dp", "2", "--tp", "2", "--zero", "3", "--grad-clip",
               "0.5"]),
             ("f32_clip_dp2", "F32", "transformer.", True, 2,
              ["--dp", "2", "--grad-clip", "0.5"]),
             ("f16_1rank", "F16", "", False, 1, []),
             # the units' mixed precision against torch applying the casts
             ("f32_dp2_tp2_zero3_bf16", "F32", "transformer.", True, 4,
              ["--dp", "2", "--tp", "2", "--zero", "3", "--param-dtype",
               "bf16", "--reduce-dtype", "bf16"]),
             ("f32_dp2_zero2_bf16_f32", "F32", "transformer.", True, 2,
              ["--dp", "2", "--zero", "2", "--param-dtype", "bf16",
               "--reduce-dtype", "f32"]),
             # HSDP (2 replicas of 2 shards) under mixed precision: the
             # replicas' all-reduce in reduce_dtype, bf16 and f32
             ("f32_R2_S2_zero3_bf16", "F32", "transformer.", True, 4,
              ["--dp", "4", "--dp-replicate", "2", "--zero", "3",
               "--param-dtype", "bf16", "--reduce-dtype", "bf16"]),
             ("f32_R2_S2_zero1_bf16_f32", "F32", "transformer.", True, 4,
              ["--dp", "4", "--dp-replicate", "2", "--zero", "1",
               "--param-dtype", "bf16", "--reduce-dtype", "f32"])]
    device = "cpu"
    if len(sys.argv) > 3 and sys.argv[2] == "--device":
        device = sys.argv[3]
        cases = [(n + "_" + device, d, pre, x, np, a + ["--device", device])
                 for n, d, pre, x, np, a in cases if np == 1]
    if len(sys.argv) > 3 and sys.argv[2] == "--skip":
        print("SKIPPED: " + sys.argv[3])
        gf.junit(os.environ.get("XML_OUTPUT_FILE"), "Gpt2Torch",
                 [(c[0], 0.0, ("skipped", sys.argv[3])) for c in cases])
        return 0
    import torch
    print("PyTorch %s" % torch.__version__)
    if device == "cuda" and not torch.cuda.is_available():
        print("SKIPPED: this PyTorch has no CUDA device")
        return 0
    tmp = tempfile.mkdtemp(prefix="gpt2_torch_")
    with open(os.path.abspath(__file__), "rb") as f:
        text = f.read()[:150]  # 150 tokens: B*T+1 = 33 per step, wraps
    tokens = list(text)
    tok_path = os.path.join(tmp, "tokens.bin")
    gf.write_tokens(tok_path, tokens)
    results, ref = [], {}

    def uncast(params, dtype):
        if (dtype, None, None, 1, 1) not in ref:
            ref[(dtype, None, None, 1, 1)] = torch_losses(params, tokens,
                                                          device)
        return ref[(dtype, None, None, 1, 1)]
    for name, dtype, prefix, hf_extras, np, args in cases:
        start = time.time()
        params = gf.random_params(L, C, V, P, seed=11, dtype=dtype)
        d = os.path.join(tmp, name)
        gf.write_model(d, params, L, C, H, V, P, dtype=dtype, prefix=prefix,
                       mask_buffers=hf_extras, lm_head=hf_extras)
        def flag(name, default=None):
            return args[args.index(name) + 1] if name in args else default
        clip = float(flag("--grad-clip")) if "--grad-clip" in args else None
        cast = (flag("--param-dtype", "f32"), flag("--reduce-dtype", "f32"))
        cast = None if cast == ("f32", "f32") else cast
        dp = int(flag("--dp", "1"))
        rep = int(flag("--dp-replicate", "1"))
        key = (dtype, clip, cast, dp if cast else 1, rep)
        if key not in ref:
            ref[key] = torch_losses(params, tokens, device, clip, cast, dp,
                                    rep)
        want = ref[key]
        rc, got, log = run_gpt2(binary, d, tok_path, np, args)
        fail = None
        if rc != 0 or len(got) != STEPS:
            fail = "train_gpt2 exit %d, %d loss lines" % (rc, len(got))
        elif clip is not None and "(clipped)" not in log:
            fail = "--grad-clip %g never clipped: the case tests nothing" % clip
        elif cast is not None and max(
                abs(a - b) / abs(b) for a, b in
                zip(want, uncast(params, dtype))) <= 10 * TOL_CAST:
            fail = ("torch's losses with and without the casts agree within "
                    "%g: the case tests nothing" % (10 * TOL_CAST))
        else:
            rel = [abs(g - w) / abs(w) for g, w in zip(got, want)]
            worst = max(range(STEPS), key=lambda i: rel[i])
            print("[%s] max relative loss difference %.2e (step %d: train_gpt2 "
                  "%.6f, torch %.6f)" % (name, rel[worst], worst, got[worst],
                                         want[worst]))
            tol = TOL_CAST if cast else TOL
            if not rel[worst] <= tol:
                fail = "step %d: train_gpt2 %.6f, torch %.6f (rel %.2e > %g)" % (
                    worst, got[worst], want[worst], rel[worst], tol)
        if fail:
            print("[%s] FAIL: %s\n%s" % (name, fail, log[-3000:]))
        results.append((name, time.time() - start, fail))
    print("torch losses: " + " ".join(
        "%.5f" % v for v in ref[("F32", None, None, 1, 1)]))
    shutil.rmtree(tmp, ignore_errors=True)
    return gf.finish("Gpt2Torch", "gpt2 vs torch", results)


if __name__ == "__main__":
    sys.exit(main())
