# SPDX-License-Identifier: BSD-3-Clause
"""Files train_gpt2 reads, written with Python's standard library only
(tests/examples' GPT-2 tests share this): safetensors (with our own
writer: the `safetensors` package is not needed), Hugging Face's
config.json and llm.c token files; plus GPT-2 parameters in Hugging Face's
names and layout from a seeded generator."""
import array
import json
import os
import random
import struct
import subprocess


def f32_bytes(values):
    return array.array("f", values).tobytes()


def f16_bytes(values):
    return struct.pack("<%de" % len(values), *values)


def bf16_bits(v):
    """bf16 of a float, rounded to nearest even (as torch rounds)."""
    (b,) = struct.unpack("<I", struct.pack("<f", v))
    b += 0x7FFF + ((b >> 16) & 1)
    return (b >> 16) & 0xFFFF


def bf16_bytes(values):
    return struct.pack("<%dH" % len(values), *[bf16_bits(v) for v in values])


def bf16_round(v):
    return struct.unpack("<f", struct.pack("<I", bf16_bits(v) << 16))[0]


def f16_round(v):
    return struct.unpack("<e", struct.pack("<e", v))[0]


DTYPES = {"F32": (f32_bytes, lambda v: v), "F16": (f16_bytes, f16_round),
          "BF16": (bf16_bytes, bf16_round)}


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes), in file order."""
    header, offset = {}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)  # aligned data, as the library
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)


def write_config(model_dir, n_layer, n_embd, n_head, vocab, n_positions,
                 **extra):
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
           "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
           "n_layer": n_layer, "n_embd": n_embd, "n_head": n_head,
           "vocab_size": vocab, "n_positions": n_positions, "n_ctx": n_positions,
           "n_inner": None, "scale_attn_weights": True}
    cfg.update(extra)
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def write_tokens(path, tokens):
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def param_shapes(n_layer, n_embd, vocab, n_positions, n_inner=None):
    """(name, shape) of GPT-2's parameters in Hugging Face's order and
    Conv1D [in, out] layout, without the "transformer." prefix."""
    C, F = n_embd, n_inner or 4 * n_embd
    out = [("wte.weight", [vocab, C]), ("wpe.weight", [n_positions, C])]
    for i in range(n_layer):
        h = "h.%d." % i
        out += [(h + "ln_1.weight", [C]), (h + "ln_1.bias", [C]),
                (h + "attn.c_attn.weight", [C, 3 * C]),
                (h + "attn.c_attn.bias", [3 * C]),
                (h + "attn.c_proj.weight", [C, C]), (h + "attn.c_proj.bias", [C]),
                (h + "ln_2.weight", [C]), (h + "ln_2.bias", [C]),
                (h + "mlp.c_fc.weight", [C, F]), (h + "mlp.c_fc.bias", [F]),
                (h + "mlp.c_proj.weight", [F, C]), (h + "mlp.c_proj.bias", [C])]
    return out + [("ln_f.weight", [C]), ("ln_f.bias", [C])]


def random_params(n_layer, n_embd, vocab, n_positions, seed, dtype="F32",
                  n_inner=None):
    """name -> (shape, values as Python floats already rounded to dtype).
    Biases and LayerNorm parameters are random too, so that a wrong
    placement of any of them shows."""
    rng = random.Random(seed)
    rnd = DTYPES[dtype][1]
    params = {}
    for name, shape in param_shapes(n_layer, n_embd, vocab, n_positions,
                                    n_inner):
        n = 1
        for s in shape:
            n *= s
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or \
                name == "ln_f.weight":
            vals = [rnd(1.0 + rng.gauss(0, 0.1)) for _ in range(n)]
        else:
            vals = [rnd(rng.gauss(0, 0.05)) for _ in range(n)]
        params[name] = (shape, vals)
    return params


def write_model(model_dir, params, n_layer, n_embd, n_head, vocab,
                n_positions, dtype="F32", prefix="transformer.",
                mask_buffers=True, lm_head=True, drop=(), replace=None,
                **config_extra):
    """config.json + model.safetensors for `params` (random_params). drop:
    names to leave out; replace: name -> (dtype, shape, raw) to write
    instead."""
    write_config(model_dir, n_layer, n_embd, n_head, vocab, n_positions,
                 **config_extra)
    to_bytes = DTYPES[dtype][0]
    tensors = []
    for name, (shape, vals) in params.items():
        if name in drop:
            continue
        if replace and name in replace:
            d, s, raw = replace[name]
            tensors.append((prefix + name, d, s, raw))
            continue
        tensors.append((prefix + name, dtype, shape, to_bytes(vals)))
        if mask_buffers and name.endswith("attn.c_attn.weight"):
            # Hugging Face's causal mask and masked_bias buffers
            h = prefix + name[: -len("c_attn.weight")]
            P = n_positions
            mask = bytes(1 if j <= i else 0 for i in range(P) for j in range(P))
            tensors.append((h + "bias", "BOOL", [1, 1, P, P], mask))
            tensors.append((h + "masked_bias", "F32", [], f32_bytes([-1e4])))
    if lm_head:
        shape, vals = params["wte.weight"]
        tensors.append(("lm_head.weight", dtype, shape, to_bytes(vals)))
    write_safetensors(os.path.join(model_dir, "model.safetensors"), tensors,
                      {"format": "pt"})


MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca",
          "mpi_yield_when_idle", "1", "--timeout", "300"]


def losses(out):
    """{step: loss} of train_gpt2's step lines."""
    got = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[0] == "step" and f[2] == "loss":
            got[int(f[1])] = float(f[3])
    return got


def rel(a, b):
    return abs(a - b) / max(abs(b), 1.0)


def run_train(binary, args, np):
    """train_gpt2 on np ranks (np 1: no mpirun): (exit code, stdout,
    stderr)."""
    cmd = ([binary] if np == 1 else MPIRUN + ["-np", str(np), binary]) + args
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env,
                       timeout=400)
    return p.returncode, p.stdout, p.stderr


def finish(suite, label, cases):
    """Bazel's XML result for `cases` (see junit), a closing line, and the
    exit code: 1 if a case failed."""
    junit(os.environ.get("XML_OUTPUT_FILE"), suite, cases)
    failed = sum(1 for c in cases if c[2] and not isinstance(c[2], tuple))
    print("%s: %d passed, %d failed" % (label, len(cases) - failed, failed))
    return 1 if failed else 0


def junit(path, suite, cases):
    """Bazel's XML result: cases = [(name, seconds, failure or None or
    ('skipped', reason))]."""
    if not path:
        return
    from xml.sax.saxutils import quoteattr
    body, fails = "", 0
    for name, secs, res in cases:
        attrs = 'classname=%s name=%s time="%.2f"' % (quoteattr(suite),
                                                      quoteattr(name), secs)
        if res is None:
            body += '<testcase %s status="run" result="completed"/>' % attrs
        elif isinstance(res, tuple):
            body += ('<testcase %s status="notrun" result="skipped"><skipped '
                     'message=%s/></testcase>' % (attrs, quoteattr(res[1])))
        else:
            fails += 1
            body += ('<testcase %s status="run" result="completed"><failure '
                     'message=%s/></testcase>' % (attrs, quoteattr(res[:500])))
    with open(path, "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites tests="%d" '
                'failures="%d"><testsuite name=%s tests="%d" failures="%d">%s'
                '</testsuite></testsuites>\n' % (len(cases), fails,
                                                 quoteattr(suite), len(cases),
                                                 fails, body))
