// SPDX-License-Identifier: BSD-3-Clause
/* examples/train_mlp: flags and their checks (see train.h). */
#include <stdio.h>
#include <string.h>

#include "examples/train_mlp/train.h"

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: mpirun -np D*T train_mlp [options]\n\n"
      "Trains a residual MLP classifier (input projection, L blocks of\n"
      "layernorm -> colwise fc1 -> GELU -> rowwise fc2 -> residual, head)\n"
      "on synthetic teacher data with TP over the mesh's tp dim and DP\n"
      "over its dp dim.\n\n"
      "  --dp D          data-parallel size (default 1)\n"
      "  --tp T          tensor-parallel size (default 1)\n"
      "  --layers L      residual blocks (default 2)\n"
      "  --hidden H      fc1 output width, the TP-sharded size; need not\n"
      "                  divide by T (default 67)\n"
      "  --width W       residual stream width (default 32)\n"
      "  --inputs N      input features (default 16)\n"
      "  --classes C     classes (default 10)\n"
      "  --batch B       global batch, split over dp (default 64)\n"
      "  --steps S       training steps (default 40)\n"
      "  --lr X          AdamW learning rate (default 3e-3)\n"
      "  --seed N        seed of weights and data (default 1)\n"
      "  --device cpu|cuda  (cuda needs a --config=cuda build; default cpu)\n"
      "  --bucket-mib M  DP bucket cap in MiB (default 25)\n"
      "  --zero N        0: DDP-style reducer (default); 1, 2, 3: fully\n"
      "                  sharded units over dp (tpdp/fsdp.h: each block a\n"
      "                  unit, the root the rest), ZeRO level N: 1 shards\n"
      "                  the optimizer state, 2 also the gradients, 3 also\n"
      "                  the parameters between uses (checkpoints resume\n"
      "                  on any mesh and level; on cuda: f32, without\n"
      "                  --save/--load)\n"
      "  --dp-replicate R  with --zero 1-3: hybrid sharding (HSDP, FSDP2's\n"
      "                  2-D mesh): R divides D; each group of D/R\n"
      "                  consecutive dp ranks shards the units, the R\n"
      "                  groups replicate them (gradients reduce-scattered\n"
      "                  within a group, then all-reduced across groups);\n"
      "                  mesh dp_replicate x dp_shard x tp, world rank\n"
      "                  ((r*S)+s)*T+t (cpu; default 1: shard over all D)\n"
      "  --accum K       gradient accumulation: K micro-batches of --batch\n"
      "                  rows per optimizer step (micro-batch k of step s\n"
      "                  drawn as batch s*K+k), gradients reduced once,\n"
      "                  after the last (cpu; default 1)\n"
      "  --param-dtype D with --zero: the units' all-gather and compute\n"
      "                  dtype, f32 (default), bf16 or f16 (FSDP2's\n"
      "                  MixedPrecisionPolicy: the f32 shards stay the\n"
      "                  master copy; the model computes in f32 on the\n"
      "                  rounded values, its gradients rounded)\n"
      "  --reduce-dtype D  with --zero: the reduce-scatter's dtype, f32\n"
      "                  (default), bf16 or f16\n"
      "  --check         also train in one process on rank 0 and compare;\n"
      "                  exit 1 if loss or parameters differ by > 1e-4 (the\n"
      "                  reference trains on each step's K micro-batches as\n"
      "                  one batch, without accumulating; with mixed\n"
      "                  precision it applies the units' casts: each dp\n"
      "                  rank's rows apart, parameters and gradients\n"
      "                  rounded, the mean taken in --reduce-dtype)\n"
      "  --quiet         print only the summary lines\n"
      "  --save DIR      save a sharded checkpoint (model configuration,\n"
      "                  weights, AdamW state, step) into DIR when the run\n"
      "                  ends\n"
      "  --save-every N  also save into DIR every N steps\n"
      "  --load DIR      resume from the checkpoint in DIR, on any mesh: the\n"
      "                  model flags come from it (given ones must agree);\n"
      "                  --steps counts all steps, so the run goes on from "
      "the\n"
      "                  saved step to --steps\n");
}

int parse_options(int argc, char **argv, options *o) {
  *o = (options){1,    1, 2,     67,    32,    16,       10,       64, 40,
                 3e-3, 1, "cpu", 25.0,  0,     0,        NULL,     0,  NULL,
                 0,    0, 1,     "f32", "f32", TPDP_F32, TPDP_F32, 1};
  const ex_flag flags[] = {
      {"dp", EX_FLAG_INT, &o->dp, 0},
      {"tp", EX_FLAG_INT, &o->tp, 0},
      {"layers", EX_FLAG_INT, &o->layers, OPT_LAYERS},
      {"hidden", EX_FLAG_INT, &o->hidden, OPT_HIDDEN},
      {"width", EX_FLAG_INT, &o->width, OPT_WIDTH},
      {"inputs", EX_FLAG_INT, &o->inputs, OPT_INPUTS},
      {"classes", EX_FLAG_INT, &o->classes, OPT_CLASSES},
      {"batch", EX_FLAG_INT, &o->batch, OPT_BATCH},
      {"steps", EX_FLAG_INT, &o->steps, 0},
      {"lr", EX_FLAG_DOUBLE, &o->lr, OPT_LR},
      {"seed", EX_FLAG_U64, &o->seed, OPT_SEED},
      {"device", EX_FLAG_STRING, &o->device, 0},
      {"bucket-mib", EX_FLAG_DOUBLE, &o->bucket_mib, 0},
      {"check", EX_FLAG_SWITCH, &o->check, 0},
      {"quiet", EX_FLAG_SWITCH, &o->quiet, 0},
      {"save", EX_FLAG_STRING, &o->save_dir, 0},
      {"save-every", EX_FLAG_INT, &o->save_every, 0},
      {"load", EX_FLAG_STRING, &o->load_dir, 0},
      {"zero", EX_FLAG_INT, &o->zero, 0},
      {"accum", EX_FLAG_INT, &o->accum, 0},
      {"dp-replicate", EX_FLAG_INT, &o->dp_replicate, 0},
      {"param-dtype", EX_FLAG_STRING, &o->param_dtype_name, 0},
      {"reduce-dtype", EX_FLAG_STRING, &o->reduce_dtype_name, 0},
  };
  int rc =
      ex_parse_flags(argc, argv, "train_mlp", flags,
                     (int)(sizeof flags / sizeof flags[0]), &o->given, usage);
  if (rc != 0) return rc;
  const char *bad = NULL;
  if (o->dp < 1)
    bad = "--dp must be >= 1";
  else if (o->tp < 1)
    bad = "--tp must be >= 1";
  else if (o->layers < 0)
    bad = "--layers must be >= 0";
  else if (o->hidden < 1 || o->width < 1 || o->inputs < 1 || o->classes < 2)
    bad = "--hidden, --width, --inputs must be >= 1 and --classes >= 2";
  else if (o->batch < 1 || o->batch % o->dp != 0)
    bad = "--batch must be a positive multiple of --dp";
  else if (o->steps < 1)
    bad = "--steps must be >= 1";
  else if (o->bucket_mib <= 0)
    bad = "--bucket-mib must be > 0";
  else if (strcmp(o->device, "cpu") != 0 && strcmp(o->device, "cuda") != 0)
    bad = "--device must be cpu or cuda";
  else if (o->save_every < 0 || (o->save_every > 0 && o->save_dir == NULL))
    bad = "--save-every N needs N >= 1 and --save DIR";
  else if (o->zero < 0 || o->zero > 3)
    bad = "--zero must be 0, 1, 2 or 3";
  else if (o->zero > 0 && strcmp(o->device, "cpu") != 0 &&
           (o->save_dir || o->load_dir))
    bad =
        "--save and --load with --zero 1-3 run on --device cpu only (the "
        "units' device shards are not staged for checkpoints yet)";
  else if (o->dp_replicate < 1 || o->dp % o->dp_replicate != 0)
    bad = "--dp-replicate R needs R >= 1 dividing --dp";
  else if (o->dp_replicate > 1 && o->zero == 0)
    bad =
        "--dp-replicate is hybrid sharding of the fully sharded units: it "
        "needs --zero 1, 2 or 3";
  else if (o->dp_replicate > 1 && strcmp(o->device, "cpu") != 0)
    bad =
        "--dp-replicate > 1 runs on --device cpu only (CUDA units shard "
        "over dp only)";
  else if (o->accum < 1)
    bad = "--accum must be >= 1 (micro-batches per step)";
  else if (o->accum > 1 && strcmp(o->device, "cpu") != 0)
    bad =
        "--accum > 1 runs on --device cpu only (the CUDA model overwrites "
        "its gradients)";
  ex_error e;
  if (!bad && (ex_flag_float_dtype("--param-dtype", o->param_dtype_name,
                                   &o->param_dtype, &e) != 0 ||
               ex_flag_float_dtype("--reduce-dtype", o->reduce_dtype_name,
                                   &o->reduce_dtype, &e) != 0))
    bad = e.msg;
  else if (!bad && o->zero == 0 &&
           (o->param_dtype != TPDP_F32 || o->reduce_dtype != TPDP_F32))
    bad =
        "--param-dtype and --reduce-dtype are the fully sharded units' "
        "mixed precision: they need --zero 1, 2 or 3";
  else if (!bad && strcmp(o->device, "cpu") != 0 &&
           (o->param_dtype != TPDP_F32 || o->reduce_dtype != TPDP_F32))
    bad =
        "--param-dtype and --reduce-dtype run on --device cpu only (the "
        "units on CUDA are f32)";
  if (bad) {
    fprintf(stderr, "train_mlp: %s\n", bad);
    return 2;
  }
  return 0;
}

nn_adamw_opts mlp_adamw_opts(const options *o) {
  return (nn_adamw_opts){o->lr, 0.9, 0.999, 1e-8};
}
