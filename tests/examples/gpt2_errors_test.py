# SPDX-License-Identifier: BSD-3-Clause
"""train_gpt2's bad-input errors: each is one clear message naming the file
and tensor (or flag), printed once, with exit status 1, on 1 rank and, for
a selection, on 2 ranks (tp=2: the ranks agree, rank 0 prints what rank 1
found, none hangs). Also --device cuda (not built yet).
Usage: gpt2_errors_test.py TRAIN_GPT2_BINARY"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_files as gf  # noqa: E402

L, C, H, V, P = 2, 8, 2, 64, 16
def main():
    binary = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="gpt2_errors_")
    params = gf.random_params(L, C, V, P, seed=3)
    good = os.path.join(tmp, "good")
    gf.write_model(good, params, L, C, H, V, P)
    tokens = os.path.join(tmp, "tok.bin")
    gf.write_tokens(tokens, [(i * 7) % V for i in range(500)])
    big_tokens = os.path.join(tmp, "big.bin")
    gf.write_tokens(big_tokens, [(i * 7) % V for i in range(100)] + [V + 3] * 50)

    def model(name, **kw):
        d = os.path.join(tmp, name)
        gf.write_model(d, params, L, C, H, V, P, **kw)
        return d

    def raw_file(name, data):
        d = os.path.join(tmp, name)
        os.makedirs(d, exist_ok=True)
        gf.write_config(d, L, C, H, V, P)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(data)
        return d

    base = ["--data", tokens, "--batch", "2", "--seq", "8", "--steps", "2"]
    st = "model.safetensors"
    # A config with more layers than the file (the first missing tensor),
    # and one with fewer (the extra tensors).
    more = model("more")
    gf.write_config(more, L + 1, C, H, V, P)
    fewer = model("fewer")
    gf.write_config(fewer, L - 1, C, H, V, P)
    # An lm_head.weight that is not wte.weight, in the last vocabulary row
    # (on the last TP rank: rank 0 must still print it).
    shape, vals = params["wte.weight"]
    head = list(vals)
    head[C * (V - 1)] += 1.0
    untied = model("untied", replace={})
    tensors = [("transformer." + n, "F32", sh, gf.f32_bytes(vv))
               for n, (sh, vv) in params.items()]
    tensors.append(("lm_head.weight", "F32", shape, gf.f32_bytes(head)))
    gf.write_safetensors(os.path.join(untied, st), tensors)
    past = b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'
    cases = [
        ("missing_tensor",
         ["--model", model("miss", drop=("h.1.mlp.c_fc.bias",))],
         [st, "tensor 'transformer.h.1.mlp.c_fc.bias' is missing",
          "n_layer 2"]),
        ("wrong_shape", ["--model", model("shape", replace={
            "wpe.weight": ("F32", [P, C + 1],
                           gf.f32_bytes([0.0] * (P * (C + 1))))})],
         [st, "tensor 'transformer.wpe.weight' has shape [16, 9]",
          "needs [16, 8]"]),
        ("config_more_layers", ["--model", more],
         [st, "tensor 'transformer.h.2.ln_1.weight' is missing"]),
        ("config_fewer_layers", ["--model", fewer],
         [st, "tensor 'transformer.h.1.", "is not part of the GPT-2",
          "n_layer 1"]),
        ("token_out_of_vocab", ["--model", good, "--data", big_tokens,
                                "--steps", "12"],
         ["big.bin", "token 67 at position", ">= the vocabulary size 64"]),
        ("seq_beyond_positions", ["--model", good, "--seq", "32"],
         ["--seq 32 exceeds n_positions 16"]),
        ("batch_not_divisible", ["--model", good, "--batch", "3", "--dp", "2",
                                 "--tp", "1"],
         ["--batch 3 is not divisible by --dp 2"]),
        ("unsupported_dtype", ["--model", model("i32", replace={
            "ln_f.bias": ("I32", [C], bytes(4 * C))})],
         [st, "'transformer.ln_f.bias' is I32", "F32, F16, BF16 and F64"]),
        ("untied_head", ["--model", untied],
         [st, "'lm_head.weight' differs from 'transformer.wte.weight'",
          "row 63"]),
        ("header_length", ["--model", raw_file("hlen", b"\xff" * 16)],
         [st, "header length", "past the end of the file"]),
        ("header_not_json", ["--model", raw_file(
            "json", (12).to_bytes(8, "little") + b"{not json}  ")],
         [st, "header is not valid JSON"]),
        ("offsets_past_end", ["--model", raw_file(
            "past", len(past).to_bytes(8, "little") + past + b"x" * 8)],
         [st, "tensor 'a'", "reach past the data area of 8 bytes"]),
        ("device_cuda", ["--model", good, "--device", "cuda"],
         ["--device cuda: built without --config=cuda"]),
        ("tf32_on_cpu", ["--model", good, "--tf32"],
         ["--tf32 applies to --device cuda"]),
        ("device_other", ["--model", good, "--device", "tpu"],
         ["--device must be cpu or cuda, not 'tpu'"]),
        ("no_data", ["--model", good, "--data",
                     os.path.join(tmp, "none.bin")],
         ["none.bin: cannot open"]),
        # mixed precision: the units' flags, refused where they mean nothing
        ("param_dtype_without_zero", ["--model", good, "--param-dtype",
                                      "bf16"],
         ["--param-dtype and --reduce-dtype", "need --zero 1, 2 or 3"]),
        ("reduce_dtype_unknown", ["--model", good, "--zero", "2",
                                  "--reduce-dtype", "fp8"],
         ["--reduce-dtype: 'fp8' is not a dtype of the units",
          "f32, bf16 or f16"]),
        ("mixed_with_check", ["--model", good, "--zero", "3",
                              "--param-dtype", "bf16", "--check"],
         ["--check's one-process run computes without the units' casts",
          "--param-dtype bf16 --reduce-dtype f32"]),
        # flags that are not numbers: usage errors (exit 2)
        ("steps_not_a_number", ["--model", good, "--steps", "ten"],
         ["--steps: 'ten' is not an integer"], 2),
        ("lr_not_a_number", ["--model", good, "--lr", "1e-3x"],
         ["--lr: '1e-3x' is not a number"], 2),
    ]

    # On 2 ranks too: errors found by every rank alike, one found by rank 1
    # only (the head's last row), one found while training, and the flag
    # checks.
    two_ranks = {"missing_tensor", "untied_head", "token_out_of_vocab",
                 "batch_not_divisible", "offsets_past_end", "device_cuda"}
    results = []
    for case in cases:
        name, args, needles = case[:3]
        want_rc = case[3] if len(case) > 3 else 1
        for np in (1, 2):
            extra = [] if "--dp" in args else ["--tp", str(np)]
            if (np == 2) != (name in two_ranks) and \
                    not (np == 1 and name != "batch_not_divisible"):
                continue  # batch_not_divisible needs 2 ranks for --dp 2
            start = time.time()
            rc, out, err = gf.run_train(binary, base + args + extra, np)
            secs = time.time() - start
            label = "%s_np%d" % (name, np)
            # Errors, not warnings (the OpenBLAS kernel advice, binding).
            lines = [l for l in err.splitlines() if l.startswith("train_gpt2:")
                     and not l.startswith("train_gpt2: warning:")]
            fail = None
            if rc != want_rc and not (np == 2 and rc != 0):
                fail = "exit code %d, expected %d" % (rc, want_rc)
            elif len(lines) != 1:
                fail = "expected one train_gpt2 error line, got %d: %r" % (
                    len(lines), lines)
            else:
                miss = [n for n in needles if n not in lines[0]]
                if miss:
                    fail = "message %r lacks %r" % (lines[0], miss)
            print("[%s] rc=%d %s%s" % (label, rc, lines[0] if lines else "",
                                      "" if fail is None else "  FAIL: " + fail))
            if fail:
                print(out[-2000:], err[-2000:])
            results.append((label, secs, fail))
    shutil.rmtree(tmp, ignore_errors=True)
    return gf.finish("Gpt2Errors", "gpt2 errors", results)


if __name__ == "__main__":
    sys.exit(main())
