// SPDX-License-Identifier: BSD-3-Clause
/*
 * examples/train_mlp: trains a residual MLP classifier with tensor
 * parallelism inside data parallelism, through tpdp:
 *
 *   mesh dp x tp -> module tree -> tpdp_parallelize (fc1 colwise, fc2
 *   rowwise) -> tpdp_pre_dp_transform -> reducer over the dp dim ->
 *   per step: forward_begin / forward / forward_end, backward marking each
 *   gradient ready (buckets reduce while backward goes on), finalize, AdamW.
 *
 * Launch: mpirun -np D*T train_mlp --dp D --tp T [flags]; --help lists them.
 * --check also trains the same model in one process on rank 0 and compares.
 *
 * The loop (train) is written once for every device; what differs is a
 * train_backend (train.h): cpu_backend below, train_cuda_backend in
 * train_cuda.c (--device cuda, built with --config=cuda).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/common/tree.h"
#include "examples/train_mlp/mlp.h"
#include "examples/train_mlp/train.h"
#include "tpdp/tp.h"
#include "tpdp/tpdp.h"

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

static int parse_options(int argc, char **argv, options *o) {
  *o = (options){1,    1, 2,     67,    32,    16,       10,      64, 40,
                 3e-3, 1, "cpu", 25.0,  0,     0,        NULL,    0,  NULL,
                 0,    0, 1,     "f32", "f32", TPDP_F32, TPDP_F32};
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

/* ------------------------------------------------------------ model tree */

static const char *class_of(const char *path) {
  const char *last = strrchr(path, '.');
  last = last ? last + 1 : path;
  if (strcmp(path, "layers") == 0) return "ModuleList";
  if (strncmp(path, "layers.", 7) == 0 && strchr(path + 7, '.') == NULL)
    return "Block";
  if (strcmp(last, "norm") == 0) return "LayerNorm";
  return "Linear";
}

static tpdp_status build_tree(const mlp_shape *s, uint64_t seed,
                              model_tree *t) {
  memset(t, 0, sizeof *t);
  t->shape = *s;
  t->nparams = mlp_num_params(s);
  t->params = calloc((size_t)t->nparams, sizeof *t->params);
  t->names = calloc((size_t)t->nparams, sizeof *t->names);
  t->full = calloc((size_t)t->nparams, sizeof *t->full);
  t->full_grad = calloc((size_t)t->nparams, sizeof *t->full_grad);
  if (!t->params || !t->names || !t->full || !t->full_grad)
    return TPDP_ERR_OUT_OF_MEMORY;
  tpdp_status st = tpdp_module_create("ResidualMLP", &t->root);
  if (st != TPDP_SUCCESS) return st;
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  for (int i = 0; i < t->nparams; i++) {
    int ndim;
    int64_t shape[2];
    mlp_param_info(s, i, t->names[i], sizeof t->names[i], &ndim, shape);
    int64_t n = ndim == 2 ? shape[0] * shape[1] : shape[0];
    t->full[i] = calloc((size_t)n, sizeof(float));
    t->full_grad[i] = calloc((size_t)n, sizeof(float));
    if (!t->full[i] || !t->full_grad[i]) return TPDP_ERR_OUT_OF_MEMORY;
    mlp_init_param(s, i, seed, t->full[i]);
    char path[64];
    snprintf(path, sizeof path, "%s", t->names[i]);
    char *dot = strrchr(path, '.');
    *dot = '\0';
    tpdp_module *m = NULL;
    if ((st = ex_module_at(t->root, path, class_of, &m)) != TPDP_SUCCESS)
      return st;
    tpdp_tensor tensor, grad;
    tpdp_tensor_init(&tensor, t->full[i], TPDP_F32, cpu, ndim, shape);
    tpdp_tensor_init(&grad, t->full_grad[i], TPDP_F32, cpu, ndim, shape);
    tpdp_param *p = NULL;
    if ((st = tpdp_param_create(&tensor, &p)) != TPDP_SUCCESS) return st;
    tpdp_param_set_grad(p, &grad);
    st = tpdp_module_add_param(m, dot + 1, p);
    tpdp_param_release(p); /* the module holds its reference */
    if (st != TPDP_SUCCESS) return st;
    t->params[i] = p;
  }
  return TPDP_SUCCESS;
}

static void free_tree(model_tree *t) {
  tpdp_module_destroy(t->root);
  for (int i = 0; i < t->nparams && t->full; i++) {
    free(t->full[i]);
    free(t->full_grad[i]);
  }
  free(t->full);
  free(t->full_grad);
  free(t->params);
  free(t->names);
}

/* ------------------------------------------------------------ dp hook */

int train_grad_ready(int i, void *vctx) {
  dp_ctx *ctx = vctx;
  double t0 = mlp_now();
  ctx->status = tpdp_reducer_mark_ready(ctx->reducer, i);
  ctx->seconds += mlp_now() - t0;
  return ctx->status == TPDP_SUCCESS ? 0 : 1;
}

_Static_assert((int)MLP_BLOCK_FORWARD_BEGIN == (int)EX_BLOCK_FORWARD_BEGIN &&
                   (int)MLP_BLOCK_BACKWARD_END == (int)EX_BLOCK_BACKWARD_END,
               "the model's block events are ex_block_hooks' events");

int train_block_event(int event, int layer, void *vt) {
  trainer *t = vt;
  ex_error e;
  if (ex_block_hooks(t->tree.root, "layers.", layer, event, t->views, &e) !=
      0) {
    fprintf(stderr, "[rank %d] train_mlp: %s\n", t->rank, e.msg);
    return 1;
  }
  return 0;
}

/* ------------------------------------------------------------ reference */

/* Trains the same model in this one process (tp = dp = 1, full batch):
 * per-step losses into ref_loss, final parameters into ref_params. With
 * --accum K each step trains on its K micro-batches as one batch of K times
 * the rows (the same mean gradient, reached without accumulating).
 *
 * With --param-dtype / --reduce-dtype it applies the units' casts instead:
 * each step the model computes on the parameters rounded to param_dtype,
 * on each dp rank's rows of each micro-batch apart; each rank's gradient
 * is rounded to param_dtype as it is added into its sum over the
 * micro-batches; the mean over ranks is taken as the units take it (each
 * rank's sum rounded to reduce_dtype, added in rank order in f32, divided
 * by dp, rounded to reduce_dtype once), then AdamW updates the f32
 * parameters. */
static int train_reference(const options *o, const mlp_shape *s,
                           double *ref_loss, float **ref_params) {
  int np = mlp_num_params(s);
  const int mixed = o->param_dtype != TPDP_F32 || o->reduce_dtype != TPDP_F32;
  const int D = mixed ? o->dp : 1; /* dp ranks computed apart */
  float **grad = calloc((size_t)np, sizeof *grad);
  float **m1 = calloc((size_t)np, sizeof *m1),
        **m2 = calloc((size_t)np, sizeof *m2);
  float **cast = calloc((size_t)np, sizeof *cast);   /* rounded parameters */
  float **sum = calloc((size_t)np * D, sizeof *sum); /* [d * np + i] */
  int64_t *numel = calloc((size_t)np, sizeof *numel);
  const int K = o->accum, rows = o->batch * K;
  const int model_rows = mixed ? o->batch / D : rows;
  float *x = malloc(sizeof(float) * (size_t)rows * (size_t)s->d_in);
  int *labels = malloc(sizeof(int) * (size_t)rows);
  int rc = 1;
  mlp_model m;
  memset(&m, 0, sizeof m);
  if (!grad || !m1 || !m2 || !cast || !sum || !numel || !x || !labels)
    goto done;
  for (int i = 0; i < np; i++) {
    int ndim;
    int64_t shape[2];
    char name[64];
    mlp_param_info(s, i, name, sizeof name, &ndim, shape);
    numel[i] = ndim == 2 ? shape[0] * shape[1] : shape[0];
    grad[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    m1[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    m2[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    if (!grad[i] || !m1[i] || !m2[i]) goto done;
    mlp_init_param(s, i, o->seed, ref_params[i]);
    if (!mixed) continue;
    cast[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    if (!cast[i]) goto done;
    for (int d = 0; d < D; d++) {
      sum[d * np + i] = calloc((size_t)numel[i] + 1, sizeof(float));
      if (!sum[d * np + i]) goto done;
    }
  }
  if (mlp_model_init(&m, s, s->ffn, model_rows, mixed ? cast : ref_params,
                     grad) != 0)
    goto done;
  const tpdp_dtype pdt = o->param_dtype, rdt = o->reduce_dtype;
  mlp_timers t = {0, 0};
  for (int step = 0; step < o->steps; step++) {
    for (int k = 0; k < K; k++)
      mlp_make_batch(s, o->seed, step * K + k, o->batch,
                     x + (size_t)k * o->batch * s->d_in,
                     labels + (size_t)k * o->batch);
    double loss = 0;
    if (!mixed) {
      mlp_forward(&m, x, labels, (float)rows, NULL, NULL, &loss, &t);
      mlp_backward(&m, NULL, NULL, NULL, NULL, &t);
    } else {
      for (int i = 0; i < np; i++)
        for (int64_t e = 0; e < numel[i]; e++) {
          cast[i][e] = ex_round_to(pdt, ref_params[i][e]);
          for (int d = 0; d < D; d++) sum[d * np + i][e] = 0;
        }
      for (int k = 0; k < K; k++)
        for (int d = 0; d < D; d++) {
          size_t row0 = (size_t)k * o->batch + (size_t)d * model_rows;
          double l = 0;
          mlp_forward(&m, x + row0 * s->d_in, labels + row0,
                      (float)model_rows * (float)K, NULL, NULL, &l, &t);
          mlp_backward(&m, NULL, NULL, NULL, NULL, &t);
          loss += l;
          for (int i = 0; i < np; i++)
            for (int64_t e = 0; e < numel[i]; e++)
              sum[d * np + i][e] =
                  ex_round_to(pdt, sum[d * np + i][e] + grad[i][e]);
        }
      for (int i = 0; i < np; i++)
        for (int64_t e = 0; e < numel[i]; e++) {
          float acc = 0;
          for (int d = 0; d < D; d++)
            acc += ex_round_to(rdt, sum[d * np + i][e]);
          grad[i][e] = ex_round_to(rdt, acc / (float)D);
        }
    }
    for (int i = 0; i < np; i++)
      adamw_update(ref_params[i], grad[i], m1[i], m2[i], numel[i], (float)o->lr,
                   step + 1);
    ref_loss[step] = loss / rows;
  }
  rc = 0;
done:
  mlp_model_free(&m);
  for (int i = 0; i < np && grad; i++) {
    free(grad[i]);
    if (m1) free(m1[i]);
    if (m2) free(m2[i]);
    if (cast) free(cast[i]);
    for (int d = 0; d < D && sum; d++) free(sum[d * np + i]);
  }
  free(grad);
  free(m1);
  free(m2);
  free(cast);
  free(sum);
  free(numel);
  free(x);
  free(labels);
  return rc;
}

/* ------------------------------------------------------------ cpu backend
 *
 * --device cpu: the model (mlp.c) trains the module tree's own local
 * shards in place; TP collectives go through the parallelized modules'
 * hooks, and every collective is synchronous on the host. */

typedef struct {
  tpdp_module *fc1[256], *fc2[256];
  tpdp_status status;
} tp_ctx;

static int tp_allreduce(int kind, int layer, float *data, int64_t n,
                        void *vctx) {
  tp_ctx *ctx = vctx;
  tpdp_tensor t = tpdp_tensor_1d(data, TPDP_F32, n);
  ctx->status = kind == MLP_TP_ROWWISE_OUT
                    ? tpdp_tp_rowwise_output_forward(ctx->fc2[layer], &t)
                    : tpdp_tp_colwise_input_backward(ctx->fc1[layer], &t);
  return ctx->status == TPDP_SUCCESS ? 0 : 1;
}

typedef struct {
  mlp_model model;
  mlp_timers timers;
  tp_ctx tp;
  float **m1, **m2; /* AdamW moments */
} cpu_state;

static int cpu_open(trainer *t, tpdp_comm *world, tpdp_comm **mesh_comm) {
  t->dev = calloc(1, sizeof(cpu_state));
  *mesh_comm = world;
  return t->dev ? 0 : 1;
}

static int cpu_setup(trainer *t) {
  cpu_state *c = t->dev;
  if (t->o.layers > 256) {
    fprintf(stderr, "train_mlp: at most 256 layers\n");
    goto fail;
  }
  for (int l = 0; l < t->o.layers; l++) {
    char path[64];
    snprintf(path, sizeof path, "layers.%d.fc1", l);
    TRY(tpdp_module_get_submodule(t->tree.root, path, &c->tp.fc1[l]));
    snprintf(path, sizeof path, "layers.%d.fc2", l);
    TRY(tpdp_module_get_submodule(t->tree.root, path, &c->tp.fc2[l]));
  }
  int np = t->tree.nparams;
  c->m1 = calloc((size_t)np, sizeof *c->m1);
  c->m2 = calloc((size_t)np, sizeof *c->m2);
  if (!c->m1 || !c->m2) goto fail;
  for (int i = 0; i < np; i++) {
    t->rparams[i].param = *tpdp_param_tensor(t->tree.params[i]);
    t->rparams[i].grad = *tpdp_param_grad(t->tree.params[i]);
    t->param[i] = t->rparams[i].param.data;
    if (t->o.zero > 0) continue; /* sized as the shards, at the first step */
    int64_t numel = tpdp_tensor_numel(&t->rparams[i].param);
    c->m1[i] = calloc((size_t)numel + 1, sizeof(float));
    c->m2[i] = calloc((size_t)numel + 1, sizeof(float));
    if (!c->m1[i] || !c->m2[i]) goto fail;
  }
  if (mlp_model_init(&c->model, &t->s, t->f_local, t->batch_local, t->param,
                     t->grad) != 0)
    goto fail;
  if (t->o.zero > 0) {
    c->model.block_fn = train_block_event;
    c->model.block_ctx = t;
  }
  return 0;
fail:
  return 1;
}

static int cpu_forward(trainer *t, const float *x, const int *labels,
                       double *loss_sum) {
  cpu_state *c = t->dev;
  if (mlp_forward(&c->model, x, labels,
                  (float)t->batch_local * (float)t->o.accum, tp_allreduce,
                  &c->tp, loss_sum, &c->timers) != 0)
    TRY(c->tp.status);
  return 0;
fail:
  return 1;
}

static int cpu_backward(trainer *t) {
  cpu_state *c = t->dev;
  /* --zero: the units reduce at the end of each block's backward. */
  mlp_grad_ready_fn ready = t->o.zero > 0 ? NULL : train_grad_ready;
  c->model.accumulate = t->accumulate;
  if (mlp_backward(&c->model, tp_allreduce, &c->tp, ready, &t->dp,
                   &c->timers) != 0) {
    TRY(c->tp.status);
    TRY(t->dp.status);
  }
  return 0;
fail:
  return 1;
}

/* AdamW's moments of parameter i, sized as the tensor the tree holds (the
 * shard under --zero), made at first use. 0, or 1 when out of memory. */
static int cpu_moments(trainer *t, int i) {
  cpu_state *c = t->dev;
  if (c->m1[i] != NULL) return 0;
  int64_t n = tpdp_tensor_numel(tpdp_param_tensor(t->tree.params[i]));
  c->m1[i] = calloc((size_t)n + 1, sizeof(float));
  c->m2[i] = calloc((size_t)n + 1, sizeof(float));
  return c->m1[i] && c->m2[i] ? 0 : 1;
}

static int cpu_optimizer_step(trainer *t, int step) {
  cpu_state *c = t->dev;
  for (int i = 0; i < t->tree.nparams; i++) {
    /* The parameter as the tree holds it now: under --zero its shard. */
    int64_t n = tpdp_tensor_numel(tpdp_param_tensor(t->tree.params[i]));
    if (cpu_moments(t, i) != 0) return 1;
    adamw_update(t->param[i], t->grad[i], c->m1[i], c->m2[i], n, (float)t->o.lr,
                 step);
  }
  return 0;
}

static int cpu_sum_over_dp(trainer *t, double *v) {
  tpdp_tensor lt = tpdp_tensor_1d(v, TPDP_F64, 1);
  TRY(tpdp_allreduce(t->dp_comm, &lt, &lt, TPDP_OP_SUM));
  return 0;
fail:
  return 1;
}

static void cpu_print_time(const trainer *t, const train_times *tm,
                           const tpdp_reducer_stats *rs) {
  const cpu_state *c = t->dev;
  printf(
      "time: compute %.3f s, tp collectives %.3f s, dp reduction %.3f s "
      "(collectives %.3f, averaging %.3f), optimizer %.3f s\n",
      c->timers.compute, c->timers.tp_comm, rs->comm_seconds + rs->data_seconds,
      rs->comm_seconds, rs->data_seconds, tm->optim);
}

static int cpu_moment_views(trainer *t, int i, tpdp_tensor *m1,
                            tpdp_tensor *m2) {
  cpu_state *c = t->dev;
  const tpdp_tensor *p = tpdp_param_tensor(t->tree.params[i]);
  if (cpu_moments(t, i) != 0) return 1;
  TRY(tpdp_tensor_init(m1, c->m1[i], TPDP_F32, p->device, p->ndim, p->shape));
  TRY(tpdp_tensor_init(m2, c->m2[i], TPDP_F32, p->device, p->ndim, p->shape));
  return 0;
fail:
  return 1;
}

/* full_tensor is collective: every rank gathers, rank 0 compares. */
static int cpu_gather_param(trainer *t, int i, float *out, int64_t n) {
  const tpdp_tensor *lt = tpdp_param_tensor(t->tree.params[i]);
  const tpdp_spec *spec = (const tpdp_spec *)tpdp_param_spec(t->tree.params[i]);
  if (spec == NULL) {
    memcpy(out, lt->data, sizeof(float) * (size_t)n);
    return 0;
  }
  tpdp_dtensor dt = {*lt, spec};
  tpdp_tensor full;
  TRY(tpdp_dtensor_full_tensor_alloc(&dt, &full));
  memcpy(out, full.data, sizeof(float) * (size_t)n);
  free(full.data);
  return 0;
fail:
  return 1;
}

static void cpu_release(trainer *t) {
  cpu_state *c = t->dev;
  if (!c) return;
  mlp_model_free(&c->model);
  for (int i = 0; i < t->tree.nparams; i++) {
    if (c->m1) free(c->m1[i]);
    if (c->m2) free(c->m2[i]);
  }
  free(c->m1);
  free(c->m2);
  free(c);
  t->dev = NULL;
}

static const train_backend cpu_backend = {
    .runs_without_mpi = 0,
    .tree_holds_model = 1,
    .open = cpu_open,
    .place_tree = NULL,
    .setup = cpu_setup,
    .forward = cpu_forward,
    .backward = cpu_backward,
    .wait_dp = NULL, /* collectives are synchronous */
    .optimizer_step = cpu_optimizer_step,
    .sum_over_dp = cpu_sum_over_dp,
    .finish = NULL,
    .print_time = cpu_print_time,
    .moment_views = cpu_moment_views,
    .gather_param = cpu_gather_param,
    .release = cpu_release,
};

/* ------------------------------------------------------------ checkpoints
 *
 * A checkpoint holds what a resume needs: the model configuration
 * ("config", JSON), the weights under the tree's FQNs, the AdamW moments as
 * optim.exp_avg.<fqn> and optim.exp_avg_sq.<fqn> (sharded as their
 * weights: same specs), and the step the next run starts from ("step"; the
 * synthetic batch of step s is drawn from (seed, s), so the step is also
 * the data position, and AdamW's step count). */

#define CONFIG_FORMAT                                                       \
  "{\"layers\":%d,\"hidden\":%d,\"width\":%d,\"inputs\":%d,\"classes\":%d," \
  "\"batch\":%d,\"lr\":%.17g,\"seed\":%llu}"
#define CONFIG_SCAN                                                         \
  "{\"layers\":%d,\"hidden\":%d,\"width\":%d,\"inputs\":%d,\"classes\":%d," \
  "\"batch\":%d,\"lr\":%lf,\"seed\":%llu}"

/* --load: the saved configuration replaces the model flags (given ones
 * must agree) and *start receives the saved step. 0, or the exit code. */
static int read_checkpoint_config(trainer *t, tpdp_comm *world, int *start) {
  tpdp_checkpoint *ck = NULL;
  options *o = &t->o, c = t->o;
  int rc = 1;
  TRY(tpdp_checkpoint_open(o->load_dir, world, &ck));
  const char *cfg = tpdp_checkpoint_meta(ck, "config");
  const char *step = tpdp_checkpoint_meta(ck, "step");
  rc = 2;
  if (cfg == NULL || step == NULL || sscanf(step, "%d", start) != 1 ||
      sscanf(cfg, CONFIG_SCAN, &c.layers, &c.hidden, &c.width, &c.inputs,
             &c.classes, &c.batch, &c.lr, &c.seed) != 8) {
    if (t->rank == 0)
      fprintf(stderr,
              "train_mlp: --load %s: not a train_mlp checkpoint (no "
              "\"config\" and \"step\" metadata)\n",
              o->load_dir);
    goto fail;
  }
  const struct {
    unsigned bit;
    const char *flag;
    double given, saved;
  } flags[] = {{OPT_LAYERS, "--layers", o->layers, c.layers},
               {OPT_HIDDEN, "--hidden", o->hidden, c.hidden},
               {OPT_WIDTH, "--width", o->width, c.width},
               {OPT_INPUTS, "--inputs", o->inputs, c.inputs},
               {OPT_CLASSES, "--classes", o->classes, c.classes},
               {OPT_BATCH, "--batch", o->batch, c.batch},
               {OPT_LR, "--lr", o->lr, c.lr},
               {OPT_SEED, "--seed", (double)o->seed, (double)c.seed}};
  for (size_t k = 0; k < sizeof flags / sizeof *flags; k++)
    if ((o->given & flags[k].bit) && flags[k].given != flags[k].saved) {
      if (t->rank == 0)
        fprintf(stderr,
                "train_mlp: %s %g conflicts with the checkpoint in %s, "
                "trained with %g (leave the flag out)\n",
                flags[k].flag, flags[k].given, o->load_dir, flags[k].saved);
      goto fail;
    }
  if (*start >= o->steps || c.batch % o->dp != 0) {
    if (t->rank == 0)
      fprintf(stderr,
              "train_mlp: the checkpoint in %s is at step %d with batch %d: "
              "--steps must be above its step (it counts all steps) and "
              "--dp must divide the batch\n",
              o->load_dir, *start, c.batch);
    goto fail;
  }
  *o = c;
  rc = 0;
fail:
  tpdp_checkpoint_close(ck);
  return rc;
}

/* Weights and AdamW moments of every parameter, as the backend holds them. */
static int build_state(trainer *t, tpdp_state_dict *sd) {
  int np = t->tree.nparams;
  ex_adamw_entry *e = calloc((size_t)np, sizeof *e);
  if (e == NULL) goto fail;
  for (int i = 0; i < np; i++) {
    e[i].fqn = t->tree.names[i];
    e[i].spec = (const tpdp_spec *)tpdp_param_spec(t->tree.params[i]);
    e[i].param = t->rparams[i].param;
    if (t->fsdp) { /* --zero: the shards, saved as the boxes they hold */
      e[i].param = *tpdp_param_tensor(t->tree.params[i]);
      e[i].boxed = 1;
      if (tpdp_param_global_box(t->tree.params[i], NULL, NULL, e[i].offset,
                                e[i].global) != TPDP_SUCCESS)
        goto fail;
    }
    if (t->b->moment_views(t, i, &e[i].exp_avg, &e[i].exp_avg_sq) != 0)
      goto fail;
  }
  ex_error err;
  if (ex_state_dict_add_adamw(sd, e, np, &err) != 0) {
    fprintf(stderr, "[rank %d] train_mlp: %s\n", t->rank, err.msg);
    goto fail;
  }
  free(e);
  return 0;
fail:
  free(e);
  return 1;
}

/* Save after `step` steps (collective over world). */
static int save_checkpoint(trainer *t, tpdp_comm *world, int step) {
  const options *o = &t->o;
  tpdp_state_dict *sd = NULL;
  char cfg[512], steps[32];
  snprintf(cfg, sizeof cfg, CONFIG_FORMAT, o->layers, o->hidden, o->width,
           o->inputs, o->classes, o->batch, o->lr, o->seed);
  snprintf(steps, sizeof steps, "%d", step);
  double t0 = mlp_now();
  /* The device's last optimizer step must be complete. */
  if (t->b->finish && t->b->finish(t) != 0) goto fail;
  TRY(tpdp_state_dict_create(&sd));
  if (build_state(t, sd) != 0) goto fail;
  TRY(tpdp_state_dict_set_meta(sd, "config", cfg));
  TRY(tpdp_state_dict_set_meta(sd, "step", steps));
  TRY(tpdp_checkpoint_save(sd, o->save_dir, world, NULL));
  if (t->rank == 0 && !o->quiet)
    printf("checkpoint: step %d saved to %s in %.3f s\n", step, o->save_dir,
           mlp_now() - t0);
  tpdp_state_dict_destroy(sd);
  return 0;
fail:
  tpdp_state_dict_destroy(sd);
  return 1;
}

/* --load: weights and moments into this run's (possibly other) layout. */
static int load_checkpoint(trainer *t, tpdp_comm *world, int start) {
  tpdp_state_dict *sd = NULL;
  double t0 = mlp_now();
  TRY(tpdp_state_dict_create(&sd));
  if (build_state(t, sd) != 0) goto fail;
  TRY(tpdp_checkpoint_load(sd, t->o.load_dir, world, NULL));
  if (t->rank == 0 && !t->o.quiet)
    printf("checkpoint: resumed at step %d from %s in %.3f s\n", start,
           t->o.load_dir, mlp_now() - t0);
  tpdp_state_dict_destroy(sd);
  return 0;
fail:
  tpdp_state_dict_destroy(sd);
  return 1;
}

/* ------------------------------------------------------------ training */

static int wait_dp(trainer *t) { return t->b->wait_dp ? t->b->wait_dp(t) : 0; }

/* --zero: each block a fully sharded unit over dp, then the root (the
 * input projection and the head); the shards replace the parameters, and
 * the model's pointers follow the tree (t->views). */
static int shard_units(trainer *t) {
  ex_error e;
  tpdp_fully_shard_options fo = tpdp_fully_shard_options_default();
  fo.zero_level = t->o.zero;
  fo.param_dtype = t->o.param_dtype;
  fo.reduce_dtype = t->o.reduce_dtype;
  fo.stream = t->grad_stream; /* cuda: the model's stream */
  if (ex_fully_shard_blocks(t->tree.root, "layers.", t->o.layers, t->dp_comm,
                            &fo, &t->fsdp, &e) != 0 ||
      ex_param_views_create(t->tree.params, t->tree.nparams, t->param, t->grad,
                            &t->views, &e) != 0) {
    fprintf(stderr, "[rank %d] train_mlp: %s\n", t->rank, e.msg);
    return 1;
  }
  ex_param_views_refresh(t->views);
  return 0;
}

/* The root module's hooks (EX_BLOCK_* events); under --zero the model's
 * pointers follow. 0, or 1 after printing what failed. */
static int root_hooks(trainer *t, int event) {
  ex_error e;
  if (ex_module_hooks(t->tree.root, event, t->views, &e) == 0) return 0;
  fprintf(stderr, "[rank %d] train_mlp: %s\n", t->rank, e.msg);
  return 1;
}

/* Elements of parameter i's full (unsharded) tensor. */
static int64_t full_numel(const mlp_shape *s, int i) {
  int ndim;
  int64_t shape[2];
  char name[64];
  mlp_param_info(s, i, name, sizeof name, &ndim, shape);
  return ndim == 2 ? shape[0] * shape[1] : shape[0];
}

/* The whole run on backend b: exit code 0, 1 (failure or --check above
 * tolerance) or 2 (wrong number of ranks). */
static int train(const options *opt, const train_backend *b, int *argc,
                 char ***argv) {
  trainer run;
  memset(&run, 0, sizeof run);
  trainer *t = &run;
  t->o = *opt;
  t->b = b;
  t->rank = -1;
  const options *o = &t->o;
  int exit_code = 1, initialized = 0;
  float *xg = NULL, *full = NULL;
  int *labels_g = NULL;
  double *losses = NULL, *ref_loss = NULL;
  float **ref_params = NULL;

  tpdp_comm *world = NULL;
  tpdp_status ist = tpdp_init(argc, argv);
  if (ist == TPDP_SUCCESS) {
    initialized = 1;
    TRY(tpdp_comm_world(&world));
    t->rank = tpdp_comm_rank(world);
  } else if (ist != TPDP_ERR_UNSUPPORTED || !b->runs_without_mpi ||
             o->dp * o->tp != 1) {
    fprintf(stderr, "train_mlp: tpdp_init failed: %s\n", tpdp_last_error());
    return 1;
  } else {
    t->rank = 0; /* no MPI in this build; a single rank */
  }
  int start = 0; /* the first step: the checkpoint's with --load */
  if (o->load_dir) {
    int rc = read_checkpoint_config(t, world, &start);
    if (rc != 0) {
      exit_code = rc;
      goto done;
    }
  }
  int world_size = world ? tpdp_comm_size(world) : 1;
  if (world_size != o->dp * o->tp) {
    if (t->rank == 0)
      fprintf(stderr,
              "train_mlp: launched on %d ranks but --dp %d --tp %d needs %d: "
              "use mpirun -np %d\n",
              world_size, o->dp, o->tp, o->dp * o->tp, o->dp * o->tp);
    exit_code = 2;
    goto done;
  }
  /* Bind each rank near its GPU, or to its share of the host's cores
   * (TPDP_BIND=0 opts out; TPDP_DEBUG=INFO logs the binding). */
  if (world != NULL) TRY(tpdp_topo_bind_rank(world, NULL));
  tpdp_comm *mesh_comm = NULL;
  if (b->open(t, world, &mesh_comm) != 0) goto fail;
  int64_t sizes[2] = {o->dp, o->tp};
  const char *dim_names[2] = {"dp", "tp"};
  TRY(tpdp_mesh_create(mesh_comm, 2, sizes, dim_names, &t->mesh));
  int64_t coords[2];
  TRY(tpdp_mesh_coords(t->mesh, tpdp_mesh_rank(t->mesh), coords));
  t->dp_rank = (int)coords[0];
  TRY(tpdp_mesh_dim_comm_by_name(t->mesh, "dp", &t->dp_comm));

  t->s = (mlp_shape){o->inputs, o->width, o->hidden, o->classes, o->layers};
  TRY(build_tree(&t->s, o->seed, &t->tree));
  /* TP: fc1 colwise, fc2 rowwise; everything else replicated. */
  tpdp_tp_plan_entry plan[2] = {{"layers.*.fc1", TPDP_STYLE_COLWISE},
                                {"layers.*.fc2", TPDP_STYLE_ROWWISE}};
  TRY(tpdp_parallelize(t->tree.root, t->mesh, "tp", plan,
                       o->layers > 0 ? 2 : 0));
  if (t->rank == 0 && !o->quiet) {
    tpdp_tree_report *report = NULL;
    TRY(tpdp_tree_report_create(t->tree.root, NULL, 0, &report));
    printf("model (mesh dp=%d, tp=%d%s):\n%s", o->dp, o->tp, t->model_note,
           tpdp_tree_report_text(report));
    TRY(tpdp_tree_report_destroy(report));
  }
  if (o->zero > 0 && b->place_tree && b->place_tree(t) != 0) goto fail;
  /* DP sees plain local tensors from here on. */
  TRY(tpdp_pre_dp_transform(t->tree.root));

  /* The model's local sizes: fc1's rows on this TP rank (the tree holds the
   * local shards now), the batch rows on this DP rank. */
  int np = t->tree.nparams;
  const tpdp_param *fc1_b =
      o->layers > 0 ? t->tree.params[mlp_block_param(0, BLK_FC1_B)] : NULL;
  t->f_local = fc1_b ? (int)tpdp_param_tensor(fc1_b)->shape[0] : o->hidden;
  t->batch_local = o->batch / o->dp;
  t->rparams = calloc((size_t)np, sizeof *t->rparams);
  t->param = calloc((size_t)np, sizeof *t->param);
  t->grad = calloc((size_t)np, sizeof *t->grad);
  if (!t->rparams || !t->param || !t->grad) goto fail;
  if (b->setup(t) != 0) goto fail;
  for (int i = 0; i < np; i++) t->rparams[i].fqn = t->tree.names[i];
  /* Before the reducer, which broadcasts the parameters from dp rank 0;
   * --zero: into the units' shards (any saved layout). */
  if (o->zero > 0 && shard_units(t) != 0) goto fail;
  if (o->load_dir && load_checkpoint(t, world, start) != 0) goto fail;

  tpdp_reducer_options ropts = TPDP_REDUCER_OPTIONS_INIT;
  ropts.bucket_cap_bytes = (size_t)(o->bucket_mib * 1048576.0);
  if (ropts.first_bucket_bytes > ropts.bucket_cap_bytes)
    ropts.first_bucket_bytes = ropts.bucket_cap_bytes;
  ropts.producer_stream = t->grad_stream;
  /* Training states as FSDP's: prepare moves the root to FORWARD_BACKWARD,
   * finalize back to IDLE; marks inside its forward are refused. */
  ropts.module = t->tree.root;
  if (o->zero == 0)
    TRY(tpdp_reducer_create(t->dp_comm, t->rparams, np, &ropts,
                            &t->dp.reducer));
  /* The reducer broadcast the parameters from dp rank 0. */
  if (wait_dp(t) != 0) goto fail;

  xg = malloc(sizeof(float) * (size_t)o->batch * (size_t)o->inputs);
  labels_g = malloc(sizeof(int) * (size_t)o->batch);
  losses = calloc((size_t)o->steps, sizeof(double));
  if (!xg || !labels_g || !losses) goto fail;

  int bl = t->batch_local;
  train_times tm = {0, 0, 0, 0, 0};
  double t_start = mlp_now();
  const int K = o->accum;
  for (int step = start; step < o->steps; step++) {
    double loss_sum = 0;
    for (int mb = 0; mb < K; mb++) {
      /* Every rank draws the global batch; each DP rank takes its rows. */
      double h0 = mlp_now();
      mlp_make_batch(&t->s, o->seed, step * K + mb, o->batch, xg, labels_g);
      tm.data += mlp_now() - h0;
      h0 = mlp_now();
      if (root_hooks(t, EX_BLOCK_FORWARD_BEGIN) != 0) goto fail;
      tm.hooks += mlp_now() - h0;
      double mb_loss = 0;
      h0 = mlp_now();
      if (b->forward(t, xg + (size_t)t->dp_rank * bl * o->inputs,
                     labels_g + (size_t)t->dp_rank * bl, &mb_loss) != 0)
        goto fail;
      loss_sum += mb_loss;
      tm.model += mlp_now() - h0;
      h0 = mlp_now();
      if (root_hooks(t, EX_BLOCK_FORWARD_END) != 0) goto fail;
      tm.hooks += mlp_now() - h0;
      /* The micro-batches after the first add into the gradients; only the
       * last reduces them over dp (the others: no_sync). */
      const int sync = mb == K - 1;
      t->accumulate = mb > 0;
      h0 = mlp_now();
      if (o->zero == 0) {
        TRY(tpdp_reducer_set_sync(t->dp.reducer, sync));
        TRY(tpdp_reducer_prepare(t->dp.reducer));
        t->dp.seconds += mlp_now() - h0;
        /* Gradients live in the reducer's buckets; they move once, when
         * prepare rebuilds the buckets after the first step. */
        if (wait_dp(t) != 0) goto fail;
        for (int i = 0; i < np; i++) {
          tpdp_tensor gv;
          TRY(tpdp_reducer_grad_view(t->dp.reducer, i, &gv));
          t->grad[i] = gv.data;
          if (b->tree_holds_model)
            TRY(tpdp_param_set_grad(t->tree.params[i], &gv));
        }
      } else {
        TRY(tpdp_fsdp_set_requires_gradient_sync(t->fsdp, sync));
      }
      /* The root's backward hooks (each block's run inside the model). */
      h0 = mlp_now();
      if (root_hooks(t, EX_BLOCK_BACKWARD_BEGIN) != 0) goto fail;
      tm.hooks += mlp_now() - h0;
      h0 = mlp_now();
      if (b->backward(t) != 0) goto fail;
      tm.model += mlp_now() - h0;
      h0 = mlp_now();
      if (root_hooks(t, EX_BLOCK_BACKWARD_END) != 0) goto fail;
      if (o->zero > 0) {
        /* The units' reduce-scatters done, the tree views the shards. */
        if (sync) TRY(tpdp_fsdp_finalize(t->fsdp));
        ex_param_views_refresh(t->views);
      } else {
        TRY(tpdp_reducer_finalize(t->dp.reducer));
      }
      tm.finalize += mlp_now() - h0;
    }
    double h0 = mlp_now();
    /* The optimizer reads the averaged gradients. */
    if (wait_dp(t) != 0) goto fail;
    tm.finalize += mlp_now() - h0;
    h0 = mlp_now();
    if (b->optimizer_step(t, step + 1) != 0) goto fail;
    tm.optim += mlp_now() - h0;
    /* The step's loss: mean over the global batch (sum over DP ranks). */
    double lsum = loss_sum;
    if (b->sum_over_dp(t, &lsum) != 0) goto fail;
    losses[step] = lsum / ((double)o->batch * K);
    if (t->rank == 0 && !o->quiet)
      printf("step %d loss %.6f\n", step, losses[step]);
    if (o->save_every > 0 && (step + 1) % o->save_every == 0 &&
        save_checkpoint(t, world, step + 1) != 0)
      goto fail;
  }
  if (o->save_dir && (o->save_every == 0 || o->steps % o->save_every != 0) &&
      save_checkpoint(t, world, o->steps) != 0)
    goto fail;
  if (b->finish && b->finish(t) != 0) goto fail;
  /* Step time: the loop without drawing the synthetic data. */
  double elapsed = mlp_now() - t_start - tm.data;
  tpdp_reducer_stats rs;
  memset(&rs, 0, sizeof rs);
  if (o->zero == 0) TRY(tpdp_reducer_get_stats(t->dp.reducer, &rs));
  if (t->rank == 0) {
    /* tpdp's own cost: the forward hooks plus the reducer's bookkeeping
     * (its time minus collectives and passes over gradient data). */
    double bookkeeping = rs.total_seconds - rs.comm_seconds - rs.data_seconds;
    double overhead = tm.hooks + bookkeeping;
    printf(
        "throughput: %.1f samples/s (%d steps of %d samples in %.3f s; "
        "drawing the synthetic batches took another %.3f s, excluded)\n",
        (double)o->batch * K * (o->steps - start) / elapsed, o->steps - start,
        o->batch * K, elapsed, tm.data);
    b->print_time(t, &tm, &rs);
    printf(
        "tpdp overhead: %.4f s (hooks %.4f, reducer bookkeeping %.4f) = "
        "%.2f%% of step time\n",
        overhead, tm.hooks, bookkeeping, 100.0 * overhead / elapsed);
    if (o->zero == 0)
      printf("reducer: %lld buckets, rebuilt %s\n",
             (long long)tpdp_reducer_num_buckets(t->dp.reducer),
             tpdp_reducer_rebuilt(t->dp.reducer) ? "yes" : "no");
    fflush(stdout);
  }
  if (o->zero > 0) {
    ex_fsdp_stats_line(t->fsdp, t->rank, o->zero, o->param_dtype,
                       o->reduce_dtype);
    fflush(stdout);
  }
  if (world != NULL) ex_peak_memory_line(world, t->rank == 0);

  exit_code = 0;
  if (o->check) {
    /* Gather every parameter (collective) and compare on rank 0 with a
     * single-process run of the same model. */
    ref_loss = calloc((size_t)o->steps, sizeof(double));
    ref_params = calloc((size_t)np, sizeof *ref_params);
    if (!ref_loss || !ref_params) goto fail;
    for (int i = 0; i < np; i++) {
      ref_params[i] = calloc((size_t)full_numel(&t->s, i) + 1, sizeof(float));
      if (!ref_params[i]) goto fail;
    }
    int ref_rc = 0;
    if (t->rank == 0) ref_rc = train_reference(o, &t->s, ref_loss, ref_params);
    /* rel != rel, d != d: a NaN counts as a failure. */
    double max_rel = 0, max_abs = 0;
    int worst_param = 0;
    int64_t worst_elem = 0;
    for (int step = start; step < o->steps && t->rank == 0; step++) {
      double rel = fabs(losses[step] - ref_loss[step]) /
                   fmax(fabs(ref_loss[step]), 1e-12);
      if (rel > max_rel || rel != rel) max_rel = rel;
    }
    /* The units' full (TP-local) parameters back in the tree. */
    if (o->zero > 0) TRY(tpdp_fsdp_summon_full_params(t->fsdp));
    for (int i = 0; i < np; i++) {
      int64_t n = full_numel(&t->s, i);
      free(full);
      full = malloc(sizeof(float) * (size_t)n + 1);
      if (!full) goto fail;
      if (b->gather_param(t, i, full, n) != 0) goto fail;
      if (t->rank == 0)
        for (int64_t k = 0; k < n; k++) {
          double d = fabs((double)full[k] - (double)ref_params[i][k]);
          if (d > max_abs || d != d) {
            max_abs = d;
            worst_param = i;
            worst_elem = k;
          }
        }
    }
    if (o->zero > 0) TRY(tpdp_fsdp_summon_end(t->fsdp, 0));
    if (t->rank == 0) {
      printf(
          "check: max_rel_loss_diff %.3e max_abs_param_diff %.3e (%s "
          "element %lld)\n",
          max_rel, max_abs, t->tree.names[worst_param], (long long)worst_elem);
      if (ref_rc != 0 || !(max_rel <= 1e-4) || !(max_abs <= 1e-4)) {
        printf("check: FAILED (tolerance 1e-4)\n");
        exit_code = 1;
      } else {
        printf("check: ok\n");
      }
    }
  }
  goto done;
fail:
  exit_code = 1;
done:
  if (tpdp_reducer_destroy(t->dp.reducer) != TPDP_SUCCESS) {
    fprintf(stderr, "train_mlp: %s\n", tpdp_last_error());
    exit_code = 1;
  }
  b->release(t);
  ex_param_views_destroy(t->views);
  for (int i = 0; i < t->tree.nparams && ref_params; i++) free(ref_params[i]);
  free(ref_params);
  free(ref_loss);
  free(t->rparams);
  free(t->param);
  free(t->grad);
  free(xg);
  free(full);
  free(labels_g);
  free(losses);
  free_tree(&t->tree);
  for (int i = 0; t->tree_specs && i < t->tree.nparams; i++)
    tpdp_spec_destroy(t->tree_specs[i]);
  free(t->tree_specs);
  if (tpdp_mesh_destroy(t->mesh) != TPDP_SUCCESS) {
    fprintf(stderr, "train_mlp: %s\n", tpdp_last_error());
    exit_code = 1;
  }
  tpdp_comm_destroy(t->own_comm);
  fflush(stdout);
  if (initialized) tpdp_finalize();
  return exit_code;
}

int main(int argc, char **argv) {
  options o;
  int prc = parse_options(argc, argv, &o);
  if (prc != 0) return prc == 1 ? 0 : 2;
  if (strcmp(o.device, "cuda") == 0) {
#ifdef TPDP_EXAMPLES_MLP_CUDA
    return train(&o, &train_cuda_backend, &argc, &argv);
#else
    fprintf(stderr,
            "train_mlp: --device cuda: built without --config=cuda (rebuild "
            "with bazel build --config=cuda //examples:train_mlp); use "
            "--device cpu\n");
    return 2;
#endif
  }
  return train(&o, &cpu_backend, &argc, &argv);
}
