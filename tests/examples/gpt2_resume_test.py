# SPDX-License-Identifier: BSD-3-Clause
"""Checkpoints of train_gpt2 (--save, --save-every, --load) and their
consolidation into a Hugging Face GPT-2 file.

An uninterrupted 10-step run on dp=2,tp=2 against a run saved after step 5
(--steps 6 --save-every 3 --save DIR) and resumed with --load DIR --steps
10 on dp=1,tp=2 (also with --sequence-parallel), dp=1,tp=4 (5 heads and
259 vocabulary rows uneven over 4), dp=4,tp=1 and one process: each resumed
run prints steps 6..9 with the uninterrupted run's losses (within 1e-4) and
passes its own --check (the same resume in one process). A model flag next
to --load and --steps not above the saved step are refused.

Then `tpdp ckpt consolidate DIR OUT/model.safetensors`: the file's header,
read with json/struct (the `safetensors` package is not needed), holds
exactly GPT-2's parameters under Hugging Face's names and Conv1D shapes (no
optimizer state), contiguous F32 data to the end of the file, and
config.json is written next to it; train_gpt2 --model OUT on the tokens
from the saved data position has the resumed run's step-6 loss as its
first loss.

Fully sharded units: a chain of resumes across levels and meshes (--zero 3
dp=2,tp=2 -> --zero 0 one process -> --zero 1 dp=3 -> --zero 2 dp=4) prints
an uninterrupted run's losses, and the --zero 3 checkpoint consolidates to
the --zero 0 run's file (same header, data within 1e-5).

Mixed precision: a --zero 3 dp=2,tp=2 --param-dtype bf16 --reduce-dtype
bf16 run saved after step 2 resumes at --zero 1 on the same mesh with
the same dtypes (the checkpoint holds the f32 master shards and moments)
and prints the uninterrupted bf16 run's losses exactly.

Hybrid sharding: a --zero 3 run with --dp 4 --dp-replicate 2 saved after
step 4 resumes at --zero 1 --dp 2 --dp-replicate 2 --tp 2 (with --check)
and at plain --zero 2 dp=3, each printing the uninterrupted run's losses.
A chain over all three dims: (R, S, T) = (2, 2, 2) --zero 3 on 8 ranks
saved after step 3 -> (1, 4, 1) --zero 1 saved after step 6 -> one
process --zero 0 to step 9 (with --check), each segment printing the
uninterrupted one-process run's losses (within 1e-4).

Usage: gpt2_resume_test.py TRAIN_GPT2 MAKE_TOKENS TPDP
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_files as gf  # noqa: E402

MODEL = ["--layers", "2", "--embd", "20", "--heads", "5", "--vocab", "259",
         "--positions", "16", "--batch", "4", "--seq", "5", "--lr", "1e-3",
         "--weight-decay", "0.1", "--seed", "7", "--bucket-mib", "0.001"]
N_LAYER, N_EMBD, VOCAB, N_POS = 2, 20, 259, 16


def main():
    binary, make_tokens, tpdp = sys.argv[1], sys.argv[2], sys.argv[3]
    tmp = tempfile.mkdtemp(prefix="gpt2_resume_")
    tokens = os.path.join(tmp, "tokens.bin")
    ck = os.path.join(tmp, "ck")
    subprocess.run([sys.executable, make_tokens, os.path.abspath(__file__),
                    tokens], check=True, capture_output=True)
    data = ["--data", tokens]
    cases = []

    def case(name, fn):
        start = time.time()
        try:
            fail = fn()
        except Exception as e:  # a crash of the check is a failure
            fail = "%s: %r" % (name, e)
        print("[%s] %s" % (name, "ok" if fail is None else "FAILED: " + fail))
        cases.append((name, time.time() - start, fail))

    rc, out, err = gf.run_train(binary, data + MODEL + [
        "--dp", "2", "--tp", "2", "--steps", "10"], 4)
    full = gf.losses(out)
    if rc != 0 or sorted(full) != list(range(10)):
        print(out[-2000:] + err[-2000:])
        return gf.finish("Gpt2Resume", "gpt2 resume",
                         [("uninterrupted", 0, "rc=%d" % rc)])

    def save():
        rc, out, err = gf.run_train(binary, data + MODEL + [
            "--dp", "2", "--tp", "2", "--steps", "6", "--save-every", "3",
            "--save", ck], 4)
        got = gf.losses(out)
        if rc != 0 or "checkpoint: step 3 saved" not in out or \
                "checkpoint: step 6 saved" not in out:
            return "rc=%d\n%s%s" % (rc, out[-1500:], err[-1500:])
        if any(gf.rel(got[s], full[s]) > 1e-4 for s in range(6)):
            return "steps 0..5 differ from the uninterrupted run: %s" % got
        return None
    case("save dp=2,tp=2 after step 5", save)

    resumed = {}

    def resume(np_, dp, tp, extra=()):
        def fn():
            rc, out, err = gf.run_train(binary, [
                "--load", ck, "--steps", "10", "--dp", str(dp), "--tp",
                str(tp), "--check"] + list(extra), np_)
            got = gf.losses(out)
            if rc != 0 or "check: ok" not in out:
                return "rc=%d\n%s%s" % (rc, out[-1500:], err[-1500:])
            if "checkpoint: resumed at step 6" not in out:
                return "no 'resumed at step 6' line:\n" + out[-1500:]
            if sorted(got) != [6, 7, 8, 9]:
                return "printed steps %s, not 6..9" % sorted(got)
            worst = max(gf.rel(got[s], full[s]) for s in got)
            print("  steps 6..9 max rel diff %.3e" % worst)
            if worst > 1e-4:
                return "losses %s vs uninterrupted %s" % (got, full)
            resumed[(dp, tp)] = got
            return None
        return fn
    case("resume dp=1,tp=2", resume(2, 1, 2))
    case("resume dp=1,tp=2 sequence parallel",
         resume(2, 1, 2, ["--sequence-parallel"]))
    case("resume dp=1,tp=4", resume(4, 1, 4))
    case("resume dp=4,tp=1", resume(4, 4, 1))
    case("resume on 1 process", resume(1, 1, 1))

    def refused(args, needle):
        def fn():
            rc, out, err = gf.run_train(binary, args, 1)
            if rc == 0 or needle not in err:
                return "rc=%d, stderr lacks %r:\n%s" % (rc, needle, err[-800:])
            return None
        return fn
    case("--load with a model flag is refused",
         refused(["--load", ck, "--steps", "10", "--layers", "3"],
                 "leave out --model and"))
    case("--steps not above the saved step is refused",
         refused(["--load", ck, "--steps", "6"],
                 "is at step 6: --steps counts all steps"))

    hf = os.path.join(tmp, "hf")
    os.makedirs(hf)
    out_file = os.path.join(hf, "model.safetensors")

    def consolidate():
        p = subprocess.run([tpdp, "ckpt", "consolidate", ck, out_file],
                           capture_output=True, text=True)
        if p.returncode != 0:
            return "consolidate rc=%d %s" % (p.returncode, p.stderr)
        with open(out_file, "rb") as f:
            raw = f.read()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        meta = header.pop("__metadata__")
        if meta.get("format") != "pt":
            return "__metadata__ lacks format pt: %s" % meta
        want = [("transformer." + name, shape) for name, shape in
                gf.param_shapes(N_LAYER, N_EMBD, VOCAB, N_POS)]
        have = [(k, v["shape"]) for k, v in header.items()]
        if sorted(have) != sorted(want):
            return "tensors %s, want Hugging Face's %s" % (have, want)
        end = 0
        for k, v in sorted(header.items(), key=lambda kv:
                           kv[1]["data_offsets"][0]):
            size = 4
            for s in v["shape"]:
                size *= s
            if v["dtype"] != "F32" or v["data_offsets"] != [end, end + size]:
                return "%s: %s (expected F32 at [%d, %d])" % (k, v, end,
                                                            end + size)
            end += size
        if 8 + n + end != len(raw):
            return "data ends at %d, the file at %d" % (8 + n + end, len(raw))
        with open(os.path.join(hf, "config.json")) as f:
            cfg = json.load(f)
        if (cfg.get("model_type"), cfg.get("n_layer"), cfg.get("n_embd"),
                cfg.get("n_head"), cfg.get("vocab_size"),
                cfg.get("n_positions")) != ("gpt2", 2, 20, 5, 259, 16):
            return "config.json: %s" % cfg
        return None
    case("consolidate: Hugging Face names, shapes, config.json", consolidate)

    def train_from_consolidated():
        p = subprocess.run([tpdp, "ckpt", "inspect", ck, "--json"],
                           capture_output=True, text=True)
        pos = int(json.loads(p.stdout)["metadata"]["data_pos"])
        # The same batch as the resumed step 6: the tokens from the saved
        # position on.
        with open(tokens, "rb") as f:
            f.seek(256 * 4)
            body = f.read()
        toks = list(struct.unpack("<%dH" % (len(body) // 2), body))[pos:]
        shifted = os.path.join(tmp, "shifted.bin")
        gf.write_tokens(shifted, toks)
        rc, out, err = gf.run_train(binary, [
            "--model", hf, "--data", shifted, "--batch", "4", "--seq", "5",
            "--steps", "1"], 1)
        got = gf.losses(out)
        if rc != 0 or 0 not in got:
            return "rc=%d\n%s%s" % (rc, out[-1500:], err[-1500:])
        want = resumed.get((1, 1), full)[6]
        print("  first loss %.6f, resumed step 6 %.6f" % (got[0], want))
        if gf.rel(got[0], want) > 1e-5:
            return "first loss %.6f, resumed step 6 %.6f" % (got[0], want)
        return None
    case("train_gpt2 --model on the consolidated file", train_from_consolidated)

    # Fully sharded units: a chain of resumes across levels and meshes,
    # --zero 3 dp=2,tp=2 (steps 0..2) -> --zero 0 one process (3..4) ->
    # --zero 1 dp=3 (5..6) -> --zero 2 dp=4 (7..9, with --check), against
    # an uninterrupted --zero 0 run (batch 12 so that 3 and 4 divide it).
    model12 = list(MODEL)
    model12[model12.index("--batch") + 1] = "12"
    rc, out, err = gf.run_train(binary, data + model12 + [
        "--dp", "2", "--tp", "2", "--steps", "10", "--save-every", "3",
        "--save", os.path.join(tmp, "z_ref")], 4)
    full12 = gf.losses(out)
    chain = [(4, 2, 2, 3, 3, None), (1, 1, 1, 0, 5, "z3"),
             (3, 3, 1, 1, 7, "z0"), (4, 4, 1, 2, 10, "z1")]

    def link(np_, dp, tp, zero, steps, load):
        def fn():
            if sorted(full12) != list(range(10)):
                return "the uninterrupted run failed: rc=%d %s" % (rc, err)
            args = ["--dp", str(dp), "--tp", str(tp), "--zero", str(zero),
                    "--steps", str(steps), "--save",
                    os.path.join(tmp, "z%d" % zero)]
            args = (["--load", os.path.join(tmp, load)] if load else
                    data + model12) + args
            if steps == 10:
                args.append("--check")
            r, o, e = gf.run_train(binary, args, np_)
            got = gf.losses(o)
            first = 0 if load is None else {"z3": 3, "z0": 5, "z1": 7}[load]
            if r != 0 or sorted(got) != list(range(first, steps)):
                return "rc=%d steps %s\n%s%s" % (r, sorted(got), o[-1500:],
                                                  e[-1500:])
            if steps == 10 and "check: ok" not in o:
                return "--check failed:\n" + o[-1500:]
            worst = max(gf.rel(got[s], full12[s]) for s in got)
            print("  steps %d..%d max rel diff %.3e" % (first, steps - 1,
                                                        worst))
            return None if worst <= 1e-4 else "losses %s vs %s" % (got, full12)
        return fn
    for np_, dp, tp, zero, steps, load in chain:
        case("--zero %d dp=%d,tp=%d steps ..%d%s" % (
            zero, dp, tp, steps - 1, " from " + load if load else ""),
            link(np_, dp, tp, zero, steps, load))

    def consolidate_zero():
        # The --zero 3 checkpoint after step 2 and the uninterrupted --zero
        # 0 run's after step 2: the same Hugging Face file but for the
        # order of floating-point sums (data within 1e-5).
        files = []
        for name in ("z3", "z_ref_step3"):
            src = os.path.join(tmp, name if name == "z3" else "z_ref")
            dst = os.path.join(tmp, name + ".safetensors")
            if name != "z3":  # z_ref holds the last save (step 9): redo
                r, o, e = gf.run_train(binary, data + model12 + [
                    "--dp", "2", "--tp", "2", "--steps", "3", "--save",
                    src + "3"], 4)
                src += "3"
            p = subprocess.run([tpdp, "ckpt", "consolidate", src, dst],
                               capture_output=True, text=True)
            if p.returncode != 0:
                return "consolidate %s: %s" % (src, p.stderr)
            with open(dst, "rb") as f:
                files.append(f.read())
        heads = []
        for raw in files:
            (n,) = struct.unpack("<Q", raw[:8])
            heads.append((n, json.loads(raw[8:8 + n])))
        if heads[0][1] != heads[1][1]:
            return "headers differ: %s vs %s" % (heads[0][1], heads[1][1])
        a = struct.unpack("<%df" % ((len(files[0]) - 8 - heads[0][0]) // 4),
                          files[0][8 + heads[0][0]:])
        b = struct.unpack("<%df" % ((len(files[1]) - 8 - heads[1][0]) // 4),
                          files[1][8 + heads[1][0]:])
        worst = max(abs(x - y) for x, y in zip(a, b))
        print("  consolidated --zero 3 vs --zero 0: max abs diff %.3e" % worst)
        return None if worst <= 1e-5 else "max abs diff %.3e" % worst
    case("consolidate a --zero 3 checkpoint", consolidate_zero)

    def mixed_precision_resume():
        bf16 = ["--dp", "2", "--tp", "2", "--param-dtype", "bf16",
                "--reduce-dtype", "bf16"]
        r, o, e = gf.run_train(binary, data + MODEL + bf16 + [
            "--zero", "3", "--steps", "6"], 4)
        want = gf.losses(o)
        if r != 0 or sorted(want) != list(range(6)):
            return "uninterrupted: rc=%d %s" % (r, (o + e)[-1500:])
        zb = os.path.join(tmp, "zb")
        r, o, e = gf.run_train(binary, data + MODEL + bf16 + [
            "--zero", "3", "--steps", "3", "--save", zb], 4)
        if r != 0:
            return "saving: rc=%d %s" % (r, (o + e)[-1500:])
        r, o, e = gf.run_train(binary, ["--load", zb, "--zero", "1",
                                        "--steps", "6"] + bf16, 4)
        got = gf.losses(o)
        if r != 0 or sorted(got) != [3, 4, 5]:
            return "resuming: rc=%d %s" % (r, (o + e)[-1500:])
        if any(got[s] != want[s] for s in got):
            return "resumed losses %s, uninterrupted %s" % (got, want)
        return None
    case("--zero 3 bf16 saved, resumed at --zero 1 bf16", mixed_precision_resume)

    # Hybrid sharding: saved at (R, S, T, level) = (2, 2, 1, 3) after step
    # 4, resumed from it at (2, 1, 2, 1) to step 9 (with --check) and, as
    # plain FSDP, at --zero 2 dp=3; each against the uninterrupted --zero 0
    # run's losses.
    def hsdp_link(np_, args, first, steps, check):
        def fn():
            if sorted(full12) != list(range(10)):
                return "the uninterrupted run failed: rc=%d %s" % (rc, err)
            a = list(args) + ["--steps", str(steps)]
            if check:
                a.append("--check")
            r, o, e = gf.run_train(binary, a, np_)
            got = gf.losses(o)
            if r != 0 or sorted(got) != list(range(first, steps)):
                return "rc=%d steps %s\n%s%s" % (r, sorted(got), o[-1500:],
                                                  e[-1500:])
            if check and "check: ok" not in o:
                return "--check failed:\n" + o[-1500:]
            if first == 0 and "dp_shard 2, dp_replicate 2," not in o:
                return "no fsdp line naming dp_shard 2, dp_replicate 2:\n" + \
                    o[-1500:]
            worst = max(gf.rel(got[s], full12[s]) for s in got)
            print("  steps %d..%d max rel diff %.3e" % (first, steps - 1,
                                                        worst))
            return None if worst <= 1e-4 else "losses %s vs %s" % (got, full12)
        return fn
    zh = os.path.join(tmp, "zh")
    case("--zero 3 R=2,S=2,T=1 steps ..4 (saved)",
         hsdp_link(4, data + model12 + [
             "--dp", "4", "--dp-replicate", "2", "--zero", "3", "--save", zh],
             0, 5, False))
    case("--zero 1 R=2,S=1,T=2 steps 5..9 from the HSDP checkpoint",
         hsdp_link(4, ["--load", zh, "--dp", "2", "--dp-replicate", "2",
                       "--tp", "2", "--zero", "1"], 5, 10, True))
    case("--zero 2 dp=3 (no replicate) steps 5..9 from the HSDP checkpoint",
         hsdp_link(3, ["--load", zh, "--dp", "3", "--zero", "2"], 5, 10,
                   False))

    # A chain across the three dims: saved at (R, S, T) = (2, 2, 2) --zero
    # 3 on 8 ranks after step 3, resumed at (1, 4, 1) --zero 1 to step 6
    # and saved again, resumed on one process at --zero 0 to step 9 (with
    # --check); each segment against an uninterrupted one-process run.
    r1, o1, e1 = gf.run_train(binary, data + model12 + ["--steps", "10"], 1)
    full1 = gf.losses(o1)

    def chain3(np_, args, first, steps, needle):
        def fn():
            if r1 != 0 or sorted(full1) != list(range(10)):
                return "the uninterrupted one-process run failed: rc=%d %s" % (
                    r1, (o1 + e1)[-1500:])
            a = list(args) + ["--steps", str(steps)]
            if steps == 10:
                a.append("--check")
            r, o, e = gf.run_train(binary, a, np_)
            got = gf.losses(o)
            if r != 0 or sorted(got) != list(range(first, steps)):
                return "rc=%d steps %s\n%s%s" % (r, sorted(got), o[-1500:],
                                                  e[-1500:])
            if steps == 10 and "check: ok" not in o:
                return "--check failed:\n" + o[-1500:]
            if needle and needle not in o:
                return "no line with %r:\n%s" % (needle, o[-1500:])
            worst = max(gf.rel(got[s], full1[s]) for s in got)
            print("  steps %d..%d max rel diff %.3e" % (first, steps - 1,
                                                        worst))
            return None if worst <= 1e-4 else "losses %s vs %s" % (got, full1)
        return fn
    c1, c2 = os.path.join(tmp, "c1"), os.path.join(tmp, "c2")
    case("--zero 3 R=2,S=2,T=2 steps ..3 (saved)",
         chain3(8, data + model12 + [
             "--dp", "4", "--dp-replicate", "2", "--tp", "2", "--zero", "3",
             "--save", c1], 0, 4, "dp_shard 2, dp_replicate 2,"))
    case("--zero 1 R=1,S=4,T=1 steps 4..6 from it (saved)",
         chain3(4, ["--load", c1, "--dp", "4", "--zero", "1", "--save", c2],
                4, 7, "checkpoint: resumed at step 4"))
    case("--zero 0 one process steps 7..9 from that",
         chain3(1, ["--load", c2, "--zero", "0"], 7, 10,
                "checkpoint: resumed at step 7"))

    shutil.rmtree(tmp, ignore_errors=True)
    return gf.finish("Gpt2Resume", "gpt2 resume", cases)


if __name__ == "__main__":
    sys.exit(main())
