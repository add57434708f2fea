// SPDX-License-Identifier: BSD-3-Clause
/* examples/train_gpt2 --device cpu: the model of gpt2.c (OpenBLAS) and
 * AdamW on the host; the TP collectives are tp/'s functions over the host
 * mesh (see train.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/train_gpt2/train.h"

typedef struct {
  gpt2_model model;
  int model_ready;
  double loss_sum; /* the last forward's */
  gpt2_ops ops;
} cpu_state;

/* ---- the model's TP callbacks (gpt2_ops), on tp/'s functions ---- */

static int op_allreduce(void *ctx, float *buf, int64_t n) {
  trainer *t = ctx;
  if (t->o.tp == 1 || n == 0) return 0;
  tpdp_tensor v = tpdp_tensor_1d(buf, TPDP_F32, n);
  tpdp_status st = tpdp_allreduce(t->tp_comm, &v, &v, TPDP_OP_SUM);
  return st == TPDP_SUCCESS ? 0 : tpdp_fail(t, "tpdp_allreduce (tp)", st);
}

static void act_views(trainer *t, float *shard, float *full, tpdp_tensor *s,
                      tpdp_tensor *f) {
  int64_t ss[3] = {t->dims.B, t->dims.tl, t->c.n_embd};
  int64_t fs[3] = {t->dims.B, t->dims.T, t->c.n_embd};
  tpdp_device cpu = {TPDP_DEVICE_CPU, 0};
  tpdp_tensor_init(s, shard, TPDP_F32, cpu, 3, ss);
  tpdp_tensor_init(f, full, TPDP_F32, cpu, 3, fs);
}

static int op_seq_gather(void *ctx, const float *shard, float *full) {
  trainer *t = ctx;
  tpdp_tensor s, f;
  act_views(t, (float *)shard, full, &s, &f);
  tpdp_status st = tpdp_tp_sequence_gather(t->sp_module, &s, 1, &f);
  return st == TPDP_SUCCESS ? 0 : tpdp_fail(t, "tpdp_tp_sequence_gather", st);
}

static int op_seq_reduce_scatter(void *ctx, const float *full, float *shard) {
  trainer *t = ctx;
  tpdp_tensor s, f;
  act_views(t, shard, (float *)full, &s, &f);
  tpdp_status st =
      tpdp_tp_rowwise_output_reduce_scatter(t->sp_module, &f, 1, &s);
  return st == TPDP_SUCCESS
             ? 0
             : tpdp_fail(t, "tpdp_tp_rowwise_output_reduce_scatter", st);
}

static int op_embed(void *ctx, const int32_t *ids, int64_t n, float *out) {
  trainer *t = ctx;
  tpdp_tensor o = tpdp_tensor_1d(out, TPDP_F32, n * t->c.n_embd);
  tpdp_status st = tpdp_tp_vocab_embedding_forward(t->wte, ids, n, &o);
  return st == TPDP_SUCCESS
             ? 0
             : tpdp_fail(t, "tpdp_tp_vocab_embedding_forward", st);
}

static int op_embed_backward(void *ctx, const int32_t *ids, int64_t n,
                             const float *dout, float *dwte) {
  trainer *t = ctx;
  tpdp_tensor g = tpdp_tensor_1d((float *)dout, TPDP_F32, n * t->c.n_embd);
  tpdp_tensor w =
      tpdp_tensor_1d(dwte, TPDP_F32, (int64_t)t->dims.vl * t->c.n_embd);
  tpdp_status st = tpdp_tp_vocab_embedding_backward(t->wte, ids, n, &g, &w);
  return st == TPDP_SUCCESS
             ? 0
             : tpdp_fail(t, "tpdp_tp_vocab_embedding_backward", st);
}

static int op_cross_entropy(void *ctx, float *logits, const int32_t *targets,
                            int64_t n, float scale, double *loss_sum) {
  trainer *t = ctx;
  tpdp_tensor z = tpdp_tensor_1d(logits, TPDP_F32, n * t->dims.vl);
  tpdp_status st =
      tpdp_tp_vocab_cross_entropy(t->wte, &z, targets, n, scale, loss_sum);
  return st == TPDP_SUCCESS ? 0
                            : tpdp_fail(t, "tpdp_tp_vocab_cross_entropy", st);
}

/* ---- --zero: the blocks' module hooks (gpt2_ops.block) ---- */

_Static_assert((int)GPT2_BLOCK_FORWARD_BEGIN == (int)EX_BLOCK_FORWARD_BEGIN &&
                   (int)GPT2_BLOCK_BACKWARD_END == (int)EX_BLOCK_BACKWARD_END,
               "the model's block events are ex_block_hooks' events");

static int op_block(void *ctx, int event, int layer) {
  trainer *t = ctx;
  return ex_block_hooks(t->root, "transformer.h.", layer, event, t->views,
                        &t->err);
}

static void cpu_release(trainer *t) {
  cpu_state *c = t->dev;
  if (c != NULL && c->model_ready) gpt2_model_free(&c->model);
  for (int i = 0; i < t->np; i++) {
    if (t->m1) free(t->m1[i]);
    if (t->m2) free(t->m2[i]);
  }
  free(c);
  t->dev = NULL;
}

/* The model trains on the tree's own tensors: the reducer sees them. */
static int cpu_setup(trainer *t) {
  cpu_state *c = calloc(1, sizeof *c);
  if (c == NULL) return ex_fail(&t->err, "out of memory");
  t->dev = c;
  t->reduce_comm = t->dp_comm;
  t->device = (tpdp_device){TPDP_DEVICE_CPU, 0};
  t->grad_stream = NULL;
  for (int i = 0; i < t->np; i++) {
    t->rparams[i].param = *tpdp_param_tensor(t->params[i]);
    t->rparams[i].grad = *tpdp_param_grad(t->params[i]);
    t->P[i] = t->rparams[i].param.data;
    t->G[i] = t->rparams[i].grad.data;
    if (t->o.zero > 0) continue; /* sized as the shards: shard_units */
    int64_t numel = tpdp_tensor_numel(&t->rparams[i].param);
    t->m1[i] = calloc((size_t)numel + 1, sizeof(float));
    t->m2[i] = calloc((size_t)numel + 1, sizeof(float));
    if (!t->m1[i] || !t->m2[i]) return ex_fail(&t->err, "out of memory");
  }
  if (gpt2_model_init(&c->model, &t->dims, t->P, t->G) != 0)
    return ex_fail(&t->err, "out of memory for %lld bytes of activations",
                   (long long)gpt2_activation_bytes(&t->dims));
  c->model_ready = 1;
  c->ops = (gpt2_ops){t,
                      op_allreduce,
                      op_seq_gather,
                      op_seq_reduce_scatter,
                      op_embed,
                      op_embed_backward,
                      op_cross_entropy,
                      trainer_grad_ready,
                      t->o.zero > 0 ? op_block : NULL};
  return 0;
}

static int cpu_forward(trainer *t, const ex_batch *batch, float loss_scale) {
  cpu_state *c = t->dev;
  c->loss_sum = 0;
  return gpt2_forward(&c->model, batch->tokens, batch->tokens + 1, loss_scale,
                      &c->ops, &c->loss_sum, &t->model_tm);
}

static int cpu_backward(trainer *t) {
  cpu_state *c = t->dev;
  c->model.accumulate = t->accumulate;
  return gpt2_backward(&c->model, &c->ops, &t->model_tm);
}

static int cpu_optimizer_step(trainer *t, int step) {
  /* --zero: the units left the tree viewing the shards and their averaged
   * gradients. */
  if (t->o.zero > 0) trainer_refresh_views(t);
  for (int i = 0; i < t->np; i++)
    nn_adamw(t->P[i], t->G[i], t->m1[i], t->m2[i],
             tpdp_tensor_numel(tpdp_param_tensor(t->params[i])), &t->o.adamw,
             t->info[i].decay ? t->o.weight_decay : 0.0, step);
  return 0;
}

static int cpu_loss(trainer *t, double *loss_sum) {
  *loss_sum = ((cpu_state *)t->dev)->loss_sum;
  return 0;
}

static void cpu_print_time(const trainer *t, const ex_times *tm, double comm,
                           double data) {
  printf(
      "time: compute %.3f s, tp collectives %.3f s, dp reduction %.3f s "
      "(collectives %.3f, averaging %.3f), optimizer %.3f s\n",
      t->model_tm.compute - t->model_tm0.compute,
      t->model_tm.tp_comm - t->model_tm0.tp_comm, comm + data, comm, data,
      tm->optim);
}

/* The collectives are synchronous and the tree's tensors are the model's:
 * nothing to wait for or copy back. */
const ex_backend gpt2_cpu_backend = {
    .tree_holds_model = 1,
    .setup = cpu_setup,
    .forward = cpu_forward,
    .backward = cpu_backward,
    .optimizer_step = cpu_optimizer_step,
    .loss = cpu_loss,
    .print_time = cpu_print_time,
    .release = cpu_release,
};
