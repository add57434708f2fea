// SPDX-License-Identifier: BSD-3-Clause
/* examples/train_gpt2: flags, their checks, and Hugging Face's
 * config.json (see train.h). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/train_gpt2/train.h"

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: mpirun -np D*T train_gpt2 --data FILE [options]\n\n"
      "Trains GPT-2 (Hugging Face / llm.c) with tensor parallelism over the\n"
      "mesh's tp dim and data parallelism over its dp dim.\n\n"
      "  --data FILE      llm.c token file (scripts/make-tokens writes one)\n"
      "  --model DIR      DIR/config.json + DIR/model.safetensors (Hugging\n"
      "                   Face GPT-2; f32, f16 or bf16); default: random init\n"
      "  --dp D           data-parallel size (default 1)\n"
      "  --tp T           tensor-parallel size (default 1)\n"
      "  --batch B        global batch (rows), split over dp (default 4)\n"
      "  --seq S          sequence length (default 64)\n"
      "  --steps N        training steps (default 10)\n"
      "  --lr X --beta1 X --beta2 X --eps X --weight-decay X\n"
      "                   AdamW as torch.optim.AdamW (defaults 3e-4, 0.9,\n"
      "                   0.95, 1e-8, 0.0); decay on tensors of rank >= 2\n"
      "  --sequence-parallel  shard activations on the sequence dim around\n"
      "                   LayerNorms and residual adds\n"
      "  --device cpu|cuda  where the model trains (default cpu); cuda: one\n"
      "                   GPU per rank (local rank r uses GPU r), NCCL, a\n"
      "                   --config=cuda build; strict FP32 matmuls\n"
      "  --tf32           (cuda) TF32 tensor-core matmuls, as PyTorch's\n"
      "                   allow_tf32 and llm.c: faster, not for --check\n"
      "  --bucket-mib M   DP bucket cap in MiB (default 25)\n"
      "  --grad-clip X    clip the gradients to global norm X over the whole\n"
      "                   mesh, each element counted once (as PyTorch's\n"
      "                   clip_grad_norm_ on the one-process model; cpu);\n"
      "                   the step lines show the norm (default 0: off)\n"
      "  --zero N         0: DDP-style reducer (default); 1, 2, 3: fully\n"
      "                   sharded units over dp (tpdp/fsdp.h: each block\n"
      "                   h.<l> a unit, the root the rest), ZeRO level N: 1\n"
      "                   shards the AdamW state, 2 also the gradients, 3\n"
      "                   also the parameters between uses (--device cpu;\n"
      "                   --save/--load hold the shards: resume on any\n"
      "                   mesh and level)\n"
      "  --dp-replicate R with --zero 1-3: hybrid sharding (HSDP, FSDP2's\n"
      "                   2-D mesh): R divides D; each group of D/R\n"
      "                   consecutive dp ranks shards the units, the R\n"
      "                   groups replicate them (gradients reduce-scattered\n"
      "                   within a group, then all-reduced across groups);\n"
      "                   mesh dp_replicate x dp_shard x tp, world rank\n"
      "                   ((r*S)+s)*T+t (default 1: shard over all D)\n"
      "  --accum K        gradient accumulation: K micro-batches of --batch\n"
      "                   rows per optimizer step, gradients reduced once,\n"
      "                   after the last (PyTorch's no_sync /\n"
      "                   set_requires_gradient_sync(False) for the others;\n"
      "                   --device cpu; default 1)\n"
      "  --param-dtype D  with --zero: the units' all-gather and compute\n"
      "                   dtype, f32 (default), bf16 or f16, as FSDP2's\n"
      "                   MixedPrecisionPolicy: the f32 shards stay the\n"
      "                   master copy; the model computes in f32 on the\n"
      "                   rounded values and its gradients are rounded\n"
      "  --reduce-dtype D with --zero: the reduce-scatter's dtype, f32\n"
      "                   (default), bf16 or f16\n"
      "  --check          also train in one process on rank 0 and compare;\n"
      "                   exit 1 if loss or parameters differ by > 1e-4\n"
      "                   (not with --param-dtype/--reduce-dtype: the\n"
      "                   one-process run does not cast)\n"
      "  --quiet          print only the summary lines\n"
      "  --save DIR       save a sharded checkpoint into DIR when the run "
      "ends\n"
      "                   (safetensors files + index.json: Hugging Face\n"
      "                   names, model config, AdamW state, step, data\n"
      "                   position); `tpdp ckpt consolidate DIR OUT` makes\n"
      "                   it a Hugging Face model file\n"
      "  --save-every N   also save into DIR after every N steps\n"
      "  --load DIR       resume from the checkpoint in DIR on any mesh (no\n"
      "                   --model or shape flags); --batch, --seq, --data,\n"
      "                   AdamW flags: the saved ones unless given. --steps\n"
      "                   counts all steps: a run saved after step k-1 goes\n"
      "                   on with steps k .. N-1\n"
      "random init (without --model), GPT-2's: N(0, 0.02), residual\n"
      "projections N(0, 0.02/sqrt(2L)), from --seed N (default 1):\n"
      "  --layers L --embd C --heads H --vocab V --positions P --inner F\n"
      "                   (defaults 4, 128, 4, 256, 256, 4C)\n");
}

int parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->device = "cpu";
  o->dp = o->tp = 1;
  o->batch = 4;
  o->seq = 64;
  o->steps = 10;
  o->shape = (gpt2_config){4, 128, 4, 256, 256, 0};
  o->adamw = (nn_adamw_opts){3e-4, 0.9, 0.95, 1e-8};
  o->bucket_mib = 25;
  o->accum = 1;
  o->dp_replicate = 1;
  o->seed = 1;
  o->param_dtype_name = o->reduce_dtype_name = "f32";
  o->param_dtype = o->reduce_dtype = TPDP_F32;
  const ex_flag flags[] = {
      {"data", EX_FLAG_STRING, &o->data, 0},
      {"model", EX_FLAG_STRING, &o->model_dir, 0},
      {"dp", EX_FLAG_INT, &o->dp, 0},
      {"tp", EX_FLAG_INT, &o->tp, 0},
      {"batch", EX_FLAG_INT, &o->batch, G_BATCH},
      {"seq", EX_FLAG_INT, &o->seq, G_SEQ},
      {"steps", EX_FLAG_INT, &o->steps, 0},
      {"lr", EX_FLAG_DOUBLE, &o->adamw.lr, G_LR},
      {"beta1", EX_FLAG_DOUBLE, &o->adamw.beta1, G_BETA1},
      {"beta2", EX_FLAG_DOUBLE, &o->adamw.beta2, G_BETA2},
      {"eps", EX_FLAG_DOUBLE, &o->adamw.eps, G_EPS},
      {"weight-decay", EX_FLAG_DOUBLE, &o->weight_decay, G_WD},
      {"sequence-parallel", EX_FLAG_SWITCH, &o->sp, 0},
      {"device", EX_FLAG_STRING, &o->device, 0},
      {"tf32", EX_FLAG_SWITCH, &o->tf32, 0},
      {"bucket-mib", EX_FLAG_DOUBLE, &o->bucket_mib, 0},
      {"zero", EX_FLAG_INT, &o->zero, 0},
      {"grad-clip", EX_FLAG_DOUBLE, &o->grad_clip, 0},
      {"accum", EX_FLAG_INT, &o->accum, 0},
      {"dp-replicate", EX_FLAG_INT, &o->dp_replicate, 0},
      {"param-dtype", EX_FLAG_STRING, &o->param_dtype_name, 0},
      {"reduce-dtype", EX_FLAG_STRING, &o->reduce_dtype_name, 0},
      {"check", EX_FLAG_SWITCH, &o->check, 0},
      {"quiet", EX_FLAG_SWITCH, &o->quiet, 0},
      {"seed", EX_FLAG_U64, &o->seed, G_SEED},
      {"layers", EX_FLAG_INT, &o->shape.n_layer, G_SHAPE},
      {"embd", EX_FLAG_INT, &o->shape.n_embd, G_SHAPE},
      {"heads", EX_FLAG_INT, &o->shape.n_head, G_SHAPE},
      {"vocab", EX_FLAG_INT, &o->shape.vocab, G_SHAPE},
      {"positions", EX_FLAG_INT, &o->shape.n_positions, G_SHAPE},
      {"inner", EX_FLAG_INT, &o->shape.n_inner, G_SHAPE},
      {"save", EX_FLAG_STRING, &o->save_dir, 0},
      {"save-every", EX_FLAG_INT, &o->save_every, 0},
      {"load", EX_FLAG_STRING, &o->load_dir, 0},
  };
  return ex_parse_flags(argc, argv, "train_gpt2", flags,
                        (int)(sizeof flags / sizeof flags[0]), &o->given,
                        usage);
}

/* Input errors that do not need a file: the same on every rank. */
int check_options(options *o, ex_error *e) {
  if (strcmp(o->device, "cpu") != 0 && strcmp(o->device, "cuda") != 0)
    return ex_fail(e, "--device must be cpu or cuda, not '%s'", o->device);
#ifndef TPDP_EXAMPLES_GPT2_CUDA
  if (strcmp(o->device, "cuda") == 0)
    return ex_fail(e,
                   "--device cuda: built without --config=cuda (rebuild with "
                   "bazel build --config=cuda //examples:train_gpt2); use "
                   "--device cpu");
#endif
  if (o->tf32 && strcmp(o->device, "cuda") != 0)
    return ex_fail(e, "--tf32 applies to --device cuda (the GPU's matmuls)");
  if (o->tf32 && o->check)
    return ex_fail(e,
                   "--check compares with the CPU within 1e-4, which TF32's "
                   "10-bit mantissas do not hold: leave out --tf32 or "
                   "--check");
  if (o->data == NULL && o->load_dir == NULL)
    return ex_fail(e,
                   "--data FILE is required (scripts/make-tokens FILE OUT "
                   "writes a token file from any text)");
  if (o->dp < 1 || o->tp < 1) return ex_fail(e, "--dp and --tp must be >= 1");
  if (o->batch < 1 || o->seq < 1 || o->steps < 1)
    return ex_fail(e, "--batch, --seq and --steps must be >= 1");
  /* With --load and no --batch the batch is the checkpoint's: setup checks
   * it. */
  if (o->batch % o->dp != 0 && (o->load_dir == NULL || (o->given & G_BATCH)))
    return ex_fail(e, "--batch %d is not divisible by --dp %d", o->batch,
                   o->dp);
  if (o->save_every < 0 || (o->save_every > 0 && o->save_dir == NULL))
    return ex_fail(e, "--save-every N needs N >= 1 and --save DIR");
  if (o->load_dir != NULL && (o->model_dir != NULL || (o->given & G_SHAPE)))
    return ex_fail(e,
                   "--load %s resumes the model saved there (its config is "
                   "in the checkpoint): leave out --model and "
                   "--layers/--embd/--heads/--vocab/--positions/--inner",
                   o->load_dir);
  if (o->bucket_mib <= 0) return ex_fail(e, "--bucket-mib must be > 0");
  if (!(o->grad_clip >= 0))
    return ex_fail(e, "--grad-clip must be >= 0 (0: off)");
  if (o->grad_clip > 0 && strcmp(o->device, "cpu") != 0)
    return ex_fail(e,
                   "--grad-clip runs on --device cpu only (not built for "
                   "CUDA gradients yet)");
  if (o->zero < 0 || o->zero > 3)
    return ex_fail(e, "--zero must be 0, 1, 2 or 3, not %d", o->zero);
  if (o->dp_replicate < 1 || o->dp % o->dp_replicate != 0)
    return ex_fail(e, "--dp-replicate %d must be >= 1 and divide --dp %d",
                   o->dp_replicate, o->dp);
  if (o->dp_replicate > 1 && o->zero == 0)
    return ex_fail(e,
                   "--dp-replicate is hybrid sharding of the fully sharded "
                   "units: it needs --zero 1, 2 or 3");
  if (o->accum < 1)
    return ex_fail(e, "--accum must be >= 1 (micro-batches per step), not %d",
                   o->accum);
  if (o->accum > 1 && strcmp(o->device, "cpu") != 0)
    return ex_fail(e,
                   "--accum %d runs on --device cpu only (the CUDA model "
                   "overwrites its gradients)",
                   o->accum);
  if (o->zero > 0 && strcmp(o->device, "cpu") != 0)
    return ex_fail(e,
                   "--zero %d runs on --device cpu only (fully sharded units "
                   "on CUDA are not built yet)",
                   o->zero);
  if (ex_flag_float_dtype("--param-dtype", o->param_dtype_name, &o->param_dtype,
                          e) != 0 ||
      ex_flag_float_dtype("--reduce-dtype", o->reduce_dtype_name,
                          &o->reduce_dtype, e) != 0)
    return -1;
  const int mixed = o->param_dtype != TPDP_F32 || o->reduce_dtype != TPDP_F32;
  if (mixed && o->zero == 0)
    return ex_fail(e,
                   "--param-dtype and --reduce-dtype are the fully sharded "
                   "units' mixed precision: they need --zero 1, 2 or 3");
  if (mixed && o->check)
    return ex_fail(e,
                   "--check's one-process run computes without the units' "
                   "casts, so it cannot hold 1e-4 against --param-dtype %s "
                   "--reduce-dtype %s (tests/examples/gpt2_torch_test.py "
                   "checks them against PyTorch applying the same casts)",
                   o->param_dtype_name, o->reduce_dtype_name);

  if (!(o->adamw.lr >= 0) || !(o->adamw.beta1 >= 0 && o->adamw.beta1 < 1) ||
      !(o->adamw.beta2 >= 0 && o->adamw.beta2 < 1) || !(o->adamw.eps >= 0) ||
      !(o->weight_decay >= 0))
    return ex_fail(e,
                   "AdamW needs --lr >= 0, 0 <= --beta1, --beta2 < 1, "
                   "--eps >= 0, --weight-decay >= 0");
  if (o->model_dir != NULL && (o->given & G_SHAPE))
    return ex_fail(e,
                   "--layers/--embd/--heads/--vocab/--positions/--inner "
                   "describe a random init; with --model the shape comes "
                   "from %s/config.json",
                   o->model_dir);
  return 0;
}

/* The shape: positive sizes, heads dividing the width. `src` names where
 * it came from for the messages. */
int check_shape(gpt2_config *c, const char *src, ex_error *e) {
  if (c->n_inner == 0) c->n_inner = 4 * c->n_embd;
  if (c->n_layer < 1 || c->n_embd < 1 || c->n_head < 1 || c->vocab < 1 ||
      c->n_positions < 1 || c->n_inner < 1)
    return ex_fail(e,
                   "%s: n_layer %d, n_embd %d, n_head %d, vocab_size %d, "
                   "n_positions %d, n_inner %d: each must be >= 1",
                   src, c->n_layer, c->n_embd, c->n_head, c->vocab,
                   c->n_positions, c->n_inner);
  if (c->n_embd % c->n_head != 0)
    return ex_fail(e, "%s: n_embd %d is not divisible by n_head %d", src,
                   c->n_embd, c->n_head);
  if (c->vocab > 65536)
    return ex_fail(e,
                   "%s: vocab_size %d: token files hold uint16 ids (at most "
                   "65536)",
                   src, c->vocab);
  return 0;
}

/* ------------------------------------------------------------ config.json */

static int json_int(const cJSON *root, const char *key, const char *path,
                    int required, int *out, ex_error *e) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
  if (j == NULL || cJSON_IsNull(j)) {
    if (required) return ex_fail(e, "%s: \"%s\" is missing", path, key);
    return 0;
  }
  if (!cJSON_IsNumber(j) || fabs(j->valuedouble) > 1e9 ||
      j->valuedouble != (double)(int)j->valuedouble)
    return ex_fail(e, "%s: \"%s\" is not an integer", path, key);
  *out = (int)j->valuedouble;
  return 0;
}

/* Hugging Face's GPT2Config: the sizes, and refusal of the variants this
 * trainer does not implement. */
int read_config(const char *dir, gpt2_config *c, ex_error *e) {
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *fp = fopen(path, "rb");
  if (fp == NULL) return ex_fail(e, "%s: cannot open", path);
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 > cap) {
      char *grown = realloc(text, cap = 2 * cap + 8192);
      if (grown == NULL) break;
      text = grown;
    }
    size_t r = fread(text + len, 1, cap - len - 1, fp);
    len += r;
    if (r == 0) break;
  }
  fclose(fp);
  if (text == NULL) return ex_fail(e, "%s: cannot read", path);
  text[len] = '\0';
  int rc = parse_config(text, path, c, e);
  free(text);
  return rc;
}

/* config.json's text (path names it in messages) into *c. */
int parse_config(const char *text, const char *path, gpt2_config *c,
                 ex_error *e) {
  int rc = -1;
  cJSON *root = cJSON_Parse(text);
  if (!cJSON_IsObject(root)) {
    ex_fail(e, "%s: not a JSON object", path);
    goto done;
  }
  memset(c, 0, sizeof *c);
  if (json_int(root, "n_layer", path, 1, &c->n_layer, e) ||
      json_int(root, "n_embd", path, 1, &c->n_embd, e) ||
      json_int(root, "n_head", path, 1, &c->n_head, e) ||
      json_int(root, "vocab_size", path, 1, &c->vocab, e) ||
      json_int(root, "n_positions", path, 1, &c->n_positions, e) ||
      json_int(root, "n_inner", path, 0, &c->n_inner, e))
    goto done;
  const cJSON *act =
      cJSON_GetObjectItemCaseSensitive(root, "activation_function");
  if (act != NULL && (!cJSON_IsString(act) ||
                      (strcmp(act->valuestring, "gelu_new") != 0 &&
                       strcmp(act->valuestring, "gelu_pytorch_tanh") != 0))) {
    ex_fail(e,
            "%s: activation_function must be \"gelu_new\" (GELU, tanh "
            "approximation)",
            path);
    goto done;
  }
  const cJSON *eps =
      cJSON_GetObjectItemCaseSensitive(root, "layer_norm_epsilon");
  if (eps != NULL &&
      (!cJSON_IsNumber(eps) || fabs(eps->valuedouble - 1e-5) > 1e-12)) {
    ex_fail(e, "%s: layer_norm_epsilon must be 1e-05", path);
    goto done;
  }
  static const char *const off_flags[] = {"scale_attn_by_inverse_layer_idx",
                                          "reorder_and_upcast_attn"};
  for (int i = 0; i < 2; i++) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, off_flags[i]);
    if (f != NULL && cJSON_IsTrue(f)) {
      ex_fail(e, "%s: %s is not supported", path, off_flags[i]);
      goto done;
    }
  }
  const cJSON *sc =
      cJSON_GetObjectItemCaseSensitive(root, "scale_attn_weights");
  if (sc != NULL && cJSON_IsFalse(sc)) {
    ex_fail(e, "%s: scale_attn_weights false is not supported", path);
    goto done;
  }
  rc = check_shape(c, path, e);
done:
  cJSON_Delete(root);
  return rc;
}

/* Hugging Face's config.json of c (what --model reads). */
void config_json(const gpt2_config *c, char *buf, size_t len) {
  char inner[32] = "null"; /* GPT-2's default, 4 * n_embd */
  if (c->n_inner != 4 * c->n_embd)
    snprintf(inner, sizeof inner, "%d", c->n_inner);
  snprintf(buf, len,
           "{\"architectures\":[\"GPT2LMHeadModel\"],\"model_type\":\"gpt2\","
           "\"activation_function\":\"gelu_new\",\"layer_norm_epsilon\":1e-05,"
           "\"n_layer\":%d,\"n_embd\":%d,\"n_head\":%d,\"vocab_size\":%d,"
           "\"n_positions\":%d,\"n_ctx\":%d,\"n_inner\":%s,"
           "\"scale_attn_weights\":true,\"tie_word_embeddings\":true}",
           c->n_layer, c->n_embd, c->n_head, c->vocab, c->n_positions,
           c->n_positions, inner);
}
