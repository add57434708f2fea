# SPDX-License-Identifier: BSD-3-Clause
"""examples/torch/train_gpt2.py on 4 ranks: dp x tp in {2x2, 1x4, 4x1}
trains like one process (--check, 1e-4 relative per step's loss), with
DistributedDataParallel and with --fsdp (fully_shard on each block and the
root; 2x2 and 4x1, and HSDP --dp 4 --dp-replicate 2), from
GPT-2's random initialisation and from a Hugging Face safetensors file
(f32 with the "transformer." prefix, bf16 without); the file's weights
give the loss of GPT-2's own forward written here on the raw tensors."""
import ctypes
import json
import math
import os
import struct
import sys

import pytest
import torch
from torch.nn import functional as F

import tpdp.torch as tt
from tpdp import _lib

sys.path.insert(0, os.path.join(os.getcwd(), "examples", "torch"))
import train_gpt2 as ex  # noqa: E402

L, C, H, V, P = 2, 24, 4, 67, 32
SIZE = tt.world_size()
pytestmark = pytest.mark.skipif(SIZE != 4, reason="runs on 4 ranks")


def hf_params(seed):
    g = torch.Generator().manual_seed(seed)
    shapes = [("wte.weight", [V, C]), ("wpe.weight", [P, C])]
    for i in range(L):
        h = "h.%d." % i
        shapes += [(h + "ln_1.weight", [C]), (h + "ln_1.bias", [C]),
                   (h + "attn.c_attn.weight", [C, 3 * C]),
                   (h + "attn.c_attn.bias", [3 * C]),
                   (h + "attn.c_proj.weight", [C, C]),
                   (h + "attn.c_proj.bias", [C]),
                   (h + "ln_2.weight", [C]), (h + "ln_2.bias", [C]),
                   (h + "mlp.c_fc.weight", [C, 4 * C]),
                   (h + "mlp.c_fc.bias", [4 * C]),
                   (h + "mlp.c_proj.weight", [4 * C, C]),
                   (h + "mlp.c_proj.bias", [C])]
    shapes += [("ln_f.weight", [C]), ("ln_f.bias", [C])]
    out = {}
    for n, s in shapes:
        t = torch.randn(s, generator=g) * 0.05
        if n.endswith("ln_1.weight") or n.endswith("ln_2.weight") or \
                n == "ln_f.weight":
            t += 1.0
        out[n] = t
    return out


def write_hf(d, params, dtype, prefix):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"n_layer": L, "n_embd": C, "n_head": H, "vocab_size": V,
                   "n_positions": P, "n_inner": None}, f)
    tdt = {"F32": torch.float32, "BF16": torch.bfloat16}[dtype]
    header, blobs, off = {}, [], 0
    for n, t in params.items():
        u8 = t.to(tdt).contiguous().view(torch.uint8)
        raw = ctypes.string_at(u8.data_ptr(), u8.numel())  # numpy-free
        header[prefix + n] = {"dtype": dtype, "shape": list(t.shape),
                              "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["lm_head.weight"] = dict(header[prefix + "wte.weight"])
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return {n: t.to(tdt).float() for n, t in params.items()}


def hf_loss(p, x, y):
    """GPT-2's forward on Hugging Face's tensors (Conv1D [in, out], fused
    c_attn), independent of the example's model."""
    T = x.shape[1]
    h = p["wte.weight"][x] + p["wpe.weight"][:T]
    hd = C // H
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(L):
        b = "h.%d." % i
        a = F.layer_norm(h, (C,), p[b + "ln_1.weight"], p[b + "ln_1.bias"])
        qkv = a @ p[b + "attn.c_attn.weight"] + p[b + "attn.c_attn.bias"]
        q, k, v = (t.reshape(x.shape[0], T, H, hd).transpose(1, 2)
                   for t in qkv.split(C, dim=2))
        att = (q @ k.transpose(-2, -1) / math.sqrt(hd)).masked_fill(
            ~mask, float("-inf")).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(x.shape[0], T, C)
        h = h + o @ p[b + "attn.c_proj.weight"] + p[b + "attn.c_proj.bias"]
        m = F.layer_norm(h, (C,), p[b + "ln_2.weight"], p[b + "ln_2.bias"])
        m = F.gelu(m @ p[b + "mlp.c_fc.weight"] + p[b + "mlp.c_fc.bias"],
                   approximate="tanh")
        h = h + m @ p[b + "mlp.c_proj.weight"] + p[b + "mlp.c_proj.bias"]
    h = F.layer_norm(h, (C,), p["ln_f.weight"], p["ln_f.bias"])
    logits = h @ p["wte.weight"].t()
    return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tok") / "tokens.bin")
    # a learnable sequence: the losses must fall
    toks = [(i * 7 + i // 50) % V for i in range(3000)]
    header = [20240520, 1, len(toks)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(toks), *toks))
    return path


@pytest.mark.parametrize("dp,tp,extra", [
    (2, 2, []), (1, 4, []), (4, 1, []), (2, 2, ["--fsdp"]),
    (4, 1, ["--fsdp"]),
    pytest.param(4, 1, ["--fsdp", "--dp-replicate", "2"],
                 marks=pytest.mark.skipif(
                     _lib.FULLY_SHARD_OPTIONS_VERSION < 3,
                     reason="needs C HSDP (options v3)"))])
def test_random_init_trains_like_one_process(tokens, dp, tp, extra):
    rc, losses = ex.main(["--data", tokens, "--dp", str(dp), "--tp", str(tp),
                          "--layers", "2", "--embd", "24", "--heads", "4",
                          "--vocab", str(V), "--positions", str(P),
                          "--seq", "16", "--batch", "4", "--steps", "10",
                          "--lr", "1e-3", "--check"] + extra)
    assert rc == 0
    assert len(losses) == 10 and losses[-1] < losses[0]


@pytest.mark.parametrize("dtype,prefix", [("F32", "transformer."),
                                          ("BF16", "")])
def test_hf_file_loads_and_trains(tokens, tmp_path, dtype, prefix):
    p = write_hf(str(tmp_path / "m"), hf_params(7), dtype, prefix)
    model = ex.load_hf(str(tmp_path / "m"))
    x, y = ex.batch(ex.read_tokens(tokens), 0, 4, 16)
    want = hf_loss(p, x, y).item()
    assert abs(model(x, y).item() - want) <= 1e-5 * abs(want)
    rc, losses = ex.main(["--data", tokens, "--model", str(tmp_path / "m"),
                          "--dp", "2", "--tp", "2", "--seq", "16",
                          "--steps", "5", "--check"])
    assert rc == 0
    assert abs(losses[0] - want) <= 1e-5 * abs(want)


def test_heads_must_divide_by_tp(tokens):
    with pytest.raises(SystemExit, match="heads do not divide by --tp 4"):
        ex.main(["--data", tokens, "--tp", "4", "--heads", "3", "--embd",
                 "24"])


def test_fsdp_options_are_checked(tokens):
    with pytest.raises(SystemExit, match="--dp-replicate needs --fsdp"):
        ex.main(["--data", tokens, "--dp", "4", "--dp-replicate", "2"])
    with pytest.raises(SystemExit, match="--dp-replicate 3 does not divide "
                       "--dp 4"):
        ex.main(["--data", tokens, "--dp", "4", "--dp-replicate", "3",
                 "--fsdp"])
    with pytest.raises(SystemExit, match="--param-dtype and --reduce-dtype "
                       "need --fsdp"):
        ex.main(["--data", tokens, "--dp", "4", "--param-dtype", "bf16"])
    with pytest.raises(SystemExit, match="--check compares with float32 "
                       "training: it needs --param-dtype f32"):
        ex.main(["--data", tokens, "--dp", "4", "--param-dtype", "bf16",
                 "--fsdp", "--check"])
