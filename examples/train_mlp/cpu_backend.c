// SPDX-License-Identifier: BSD-3-Clause
/* examples/train_mlp --device cpu (see train.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/train_mlp/train.h"
#include "tpdp/tp.h"

/* --device cpu: the model (mlp.c) trains the module tree's own local
 * shards in place; TP collectives go through the parallelized modules'
 * hooks, and every collective is synchronous on the host. */

typedef struct {
  tpdp_module *fc1[256], *fc2[256];
  trainer *t; /* its err gets a failed collective's message */
} tp_ctx;

static int tp_allreduce(int kind, int layer, float *data, int64_t n,
                        void *vctx) {
  tp_ctx *ctx = vctx;
  trainer *t = ctx->t;
  tpdp_tensor v = tpdp_tensor_1d(data, TPDP_F32, n);
  if (kind == MLP_TP_ROWWISE_OUT)
    TRY(tpdp_tp_rowwise_output_forward(ctx->fc2[layer], &v));
  else
    TRY(tpdp_tp_colwise_input_backward(ctx->fc1[layer], &v));
  return 0;
}

typedef struct {
  mlp_model model;
  mlp_timers timers;
  tp_ctx tp;
  float **m1, **m2; /* AdamW moments */
  double loss_sum;  /* the last forward's */
} cpu_state;

static int cpu_open(trainer *t) {
  t->dev = calloc(1, sizeof(cpu_state));
  return t->dev ? 0 : ex_fail(&t->err, "out of memory");
}

static int cpu_setup(trainer *t) {
  cpu_state *c = t->dev;
  c->tp.t = t;
  if (t->o.layers > 256) return ex_fail(&t->err, "at most 256 layers");
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
  if (!c->m1 || !c->m2) return ex_fail(&t->err, "out of memory");
  for (int i = 0; i < np; i++) {
    t->rparams[i].param = *tpdp_param_tensor(t->tree.params[i]);
    t->rparams[i].grad = *tpdp_param_grad(t->tree.params[i]);
    t->param[i] = t->rparams[i].param.data;
    if (t->o.zero > 0) continue; /* sized as the shards, at the first step */
    int64_t numel = tpdp_tensor_numel(&t->rparams[i].param);
    c->m1[i] = calloc((size_t)numel + 1, sizeof(float));
    c->m2[i] = calloc((size_t)numel + 1, sizeof(float));
    if (!c->m1[i] || !c->m2[i]) return ex_fail(&t->err, "out of memory");
  }
  if (mlp_model_init(&c->model, &t->s, t->f_local, t->batch_local, t->param,
                     t->grad) != 0)
    return ex_fail(&t->err, "out of memory for the model's activations");
  if (t->o.zero > 0) {
    c->model.block_fn = train_block_event;
    c->model.block_ctx = t;
  }
  return 0;
}

/* A model call failed: a callback left its message in t->err. */
static int model_failed(trainer *t, const char *what) {
  return t->err.msg[0] ? -1 : ex_fail(&t->err, "%s failed", what);
}

static int cpu_forward(trainer *t, const ex_batch *batch, float loss_scale) {
  cpu_state *c = t->dev;
  c->loss_sum = 0;
  if (mlp_forward(&c->model, batch->x, batch->labels, loss_scale, tp_allreduce,
                  &c->tp, &c->loss_sum, &c->timers) != 0)
    return model_failed(t, "the forward");
  return 0;
}

static int cpu_backward(trainer *t) {
  cpu_state *c = t->dev;
  /* --zero: the units reduce at the end of each block's backward. */
  mlp_grad_ready_fn ready = t->o.zero > 0 ? NULL : train_grad_ready;
  c->model.accumulate = t->accumulate;
  if (mlp_backward(&c->model, tp_allreduce, &c->tp, ready, t, &c->timers) != 0)
    return model_failed(t, "the backward");
  return 0;
}

static int cpu_loss(trainer *t, double *loss_sum) {
  *loss_sum = ((cpu_state *)t->dev)->loss_sum;
  return 0;
}

/* AdamW's moments of parameter i, sized as the tensor the tree holds (the
 * shard under --zero), made at first use. */
static int cpu_moments(trainer *t, int i) {
  cpu_state *c = t->dev;
  if (c->m1[i] != NULL) return 0;
  int64_t n = tpdp_tensor_numel(tpdp_param_tensor(t->tree.params[i]));
  c->m1[i] = calloc((size_t)n + 1, sizeof(float));
  c->m2[i] = calloc((size_t)n + 1, sizeof(float));
  return c->m1[i] && c->m2[i] ? 0 : ex_fail(&t->err, "out of memory");
}

static int cpu_optimizer_step(trainer *t, int step) {
  cpu_state *c = t->dev;
  const nn_adamw_opts ao = mlp_adamw_opts(&t->o);
  for (int i = 0; i < t->tree.nparams; i++) {
    /* The parameter as the tree holds it now: under --zero its shard. */
    int64_t n = tpdp_tensor_numel(tpdp_param_tensor(t->tree.params[i]));
    if (cpu_moments(t, i) != 0) return -1;
    nn_adamw(t->param[i], t->grad[i], c->m1[i], c->m2[i], n, &ao,
             MLP_WEIGHT_DECAY, step);
  }
  return 0;
}

static void cpu_print_time(const trainer *t, const ex_times *tm, double comm,
                           double data) {
  const cpu_state *c = t->dev;
  printf(
      "time: compute %.3f s, tp collectives %.3f s, dp reduction %.3f s "
      "(collectives %.3f, averaging %.3f), optimizer %.3f s\n",
      c->timers.compute, c->timers.tp_comm, comm + data, comm, data, tm->optim);
}

static int cpu_moment_views(trainer *t, int i, tpdp_tensor *m1,
                            tpdp_tensor *m2) {
  cpu_state *c = t->dev;
  const tpdp_tensor *p = tpdp_param_tensor(t->tree.params[i]);
  if (cpu_moments(t, i) != 0) return -1;
  TRY(tpdp_tensor_init(m1, c->m1[i], TPDP_F32, p->device, p->ndim, p->shape));
  TRY(tpdp_tensor_init(m2, c->m2[i], TPDP_F32, p->device, p->ndim, p->shape));
  return 0;
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

/* The collectives are synchronous, the mesh is over the world and the
 * tree's tensors are the model's: the loop's defaults do the rest. */
const ex_backend mlp_cpu_backend = {
    .tree_holds_model = 1,
    .open = cpu_open,
    .setup = cpu_setup,
    .forward = cpu_forward,
    .backward = cpu_backward,
    .optimizer_step = cpu_optimizer_step,
    .loss = cpu_loss,
    .print_time = cpu_print_time,
    .moment_views = cpu_moment_views,
    .release = cpu_release,
};
