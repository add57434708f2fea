// SPDX-License-Identifier: BSD-3-Clause
/*
 * examples/train_gpt2 --device cuda (built with --config=cuda only). One
 * GPU per rank:
 *  - an NCCL communicator over the host mesh's parent (its GPU is the
 *    local rank's; more local ranks than GPUs is an error on every rank)
 *    and a dp x tp mesh over it, laid out as the host mesh;
 *  - the module tree stays on the host: tp/ fills each rank's slices there
 *    and the forward hooks keep working on those host shards (bookkeeping:
 *    the model reads the device copies, made once at setup);
 *  - the model (gpt2_cuda.cu), AdamW and the activations on the GPU, on the
 *    model's stream; TP collectives are tpdp_allreduce_async (and, with
 *    sequence parallelism, allgather / reduce-scatter) on the device mesh's
 *    tp communicator, ordered after the model stream and the stream after
 *    them, with no host synchronisation;
 *  - DP: the reducer over the device mesh's dp communicator, in device
 *    memory, producer_stream = the model stream;
 *  - checkpoints save and load the device tensors (ckpt/ stages them
 *    through host memory); --check copies the trained parameters back into
 *    the host tree and gathers them there, as the CPU run does.
 */
#include <stdlib.h>
#include <string.h>

#include "examples/train_gpt2/gpt2_cuda.h"
#include "examples/train_gpt2/train.h"

typedef struct {
  tpdp_comm *nccl;    /* over t->comm */
  tpdp_mesh *mesh;    /* dp x tp over nccl */
  tpdp_comm *dp, *tp; /* its dims */
  int cuda_dev;
  gpt2_cuda_model model;
  int model_ready;
  gpt2_cuda_ops ops;
  float *sp_all, *sp_one; /* sequence parallelism: padded [tp][B][tlm][C]
                             and [B][tlm][C] */
  int tlm;                /* the sequence chunk (ceil(T / tp)) */
  int64_t state_bytes;    /* parameters, gradients, moments */
  float **gown;           /* the gradient buffers made here (the reducer's
                             buckets replace them in t->G) */
} cuda_state;

static int cuda_fail(trainer *t, const char *what) {
  return ex_fail(&t->err, "%s: %s", what, nn_cuda_last_error());
}

/* ---- the model's TP collectives (gpt2_cuda_ops) ---- */

static int queued(trainer *t, const char *what, tpdp_status st) {
  return st == TPDP_SUCCESS ? 0 : tpdp_fail(t, what, st);
}

static int op_allreduce(void *ctx, void *buf, int64_t n, int f64, int max,
                        void *stream) {
  trainer *t = ctx;
  cuda_state *c = t->dev;
  tpdp_tensor v;
  tpdp_work *work = NULL;
  tpdp_status st =
      tpdp_tensor_init(&v, buf, f64 ? TPDP_F64 : TPDP_F32, t->device, 1, &n);
  if (st == TPDP_SUCCESS) st = tpdp_comm_order_after(c->tp, stream);
  if (st == TPDP_SUCCESS)
    st = tpdp_allreduce_async(c->tp, &v, &v, max ? TPDP_OP_MAX : TPDP_OP_SUM,
                              &work);
  if (st == TPDP_SUCCESS) st = tpdp_work_wait_stream(work, stream);
  return queued(t, "tpdp_allreduce_async (tp)", st);
}

/* This rank's sequence chunk [t0, t0 + tl) of rank r's. */
static void seq_chunk(const trainer *t, int r, int *t0, int *tl) {
  int64_t s, n;
  tpdp_chunk_range(t->dims.T, t->o.tp, r, &s, &n);
  *t0 = (int)s;
  *tl = (int)n;
}

/* Sequence shards of uneven length move padded to the chunk tlm: every
 * rank sends the same bytes; the pad rows stay zero. */
static int op_seq_gather(void *ctx, const float *shard, float *full,
                         void *stream) {
  trainer *t = ctx;
  cuda_state *c = t->dev;
  const int64_t B = t->dims.B, T = t->dims.T, C = t->c.n_embd, tlm = c->tlm;
  const size_t f = sizeof(float);
  int t0, tl;
  seq_chunk(t, t->tp_rank, &t0, &tl);
  if (nn_cuda_copy_2d_async(c->sp_one, f * tlm * C, shard, f * tl * C,
                            f * tl * C, B, stream) != 0)
    return cuda_fail(t, "sequence gather");
  int64_t one = B * tlm * C, all = one * t->o.tp;
  tpdp_tensor s, r;
  tpdp_work *work = NULL;
  tpdp_status st =
      tpdp_tensor_init(&s, c->sp_one, TPDP_F32, t->device, 1, &one);
  if (st == TPDP_SUCCESS)
    st = tpdp_tensor_init(&r, c->sp_all, TPDP_F32, t->device, 1, &all);
  if (st == TPDP_SUCCESS) st = tpdp_comm_order_after(c->tp, stream);
  if (st == TPDP_SUCCESS) st = tpdp_allgather_async(c->tp, &s, &r, &work);
  if (st == TPDP_SUCCESS) st = tpdp_work_wait_stream(work, stream);
  if (queued(t, "tpdp_allgather_async (tp, sequence)", st) != 0) return -1;
  for (int q = 0; q < t->o.tp; q++) {
    seq_chunk(t, q, &t0, &tl);
    if (nn_cuda_copy_2d_async(full + t0 * C, f * T * C, c->sp_all + q * one,
                              f * tlm * C, f * tl * C, B, stream) != 0)
      return cuda_fail(t, "sequence gather");
  }
  return 0;
}

static int op_seq_reduce_scatter(void *ctx, const float *full, float *shard,
                                 void *stream) {
  trainer *t = ctx;
  cuda_state *c = t->dev;
  const int64_t B = t->dims.B, T = t->dims.T, C = t->c.n_embd, tlm = c->tlm;
  const size_t f = sizeof(float);
  int64_t one = B * tlm * C, all = one * t->o.tp;
  int t0, tl;
  for (int q = 0; q < t->o.tp; q++) {
    seq_chunk(t, q, &t0, &tl);
    if (nn_cuda_copy_2d_async(c->sp_all + q * one, f * tlm * C, full + t0 * C,
                              f * T * C, f * tl * C, B, stream) != 0)
      return cuda_fail(t, "sequence reduce-scatter");
  }
  tpdp_tensor s, r;
  tpdp_work *work = NULL;
  tpdp_status st =
      tpdp_tensor_init(&s, c->sp_all, TPDP_F32, t->device, 1, &all);
  if (st == TPDP_SUCCESS)
    st = tpdp_tensor_init(&r, c->sp_one, TPDP_F32, t->device, 1, &one);
  if (st == TPDP_SUCCESS) st = tpdp_comm_order_after(c->tp, stream);
  if (st == TPDP_SUCCESS)
    st = tpdp_reduce_scatter_async(c->tp, &s, &r, TPDP_OP_SUM, &work);
  if (st == TPDP_SUCCESS) st = tpdp_work_wait_stream(work, stream);
  if (queued(t, "tpdp_reduce_scatter_async (tp, sequence)", st) != 0) return -1;
  seq_chunk(t, t->tp_rank, &t0, &tl);
  if (nn_cuda_copy_2d_async(shard, f * tl * C, c->sp_one, f * tlm * C,
                            f * tl * C, B, stream) != 0)
    return cuda_fail(t, "sequence reduce-scatter");
  return 0;
}

/* ---- the backend ---- */

/* Collective: the NCCL communicator and the device mesh. */
static int cuda_open(trainer *t) {
  cuda_state *c = calloc(1, sizeof *c);
  if (c == NULL) return ex_fail(&t->err, "out of memory");
  t->dev = c;
  TRY(tpdp_comm_create_nccl(t->comm, -1, &c->nccl));
  c->cuda_dev = tpdp_comm_cuda_device(c->nccl);
  t->device = (tpdp_device){TPDP_DEVICE_CUDA, c->cuda_dev};
  int64_t sizes[2] = {t->o.dp, t->o.tp};
  const char *names[2] = {"dp", "tp"};
  TRY(tpdp_mesh_create(c->nccl, 2, sizes, names, &c->mesh));
  TRY(tpdp_mesh_dim_comm_by_name(c->mesh, "dp", &c->dp));
  TRY(tpdp_mesh_dim_comm_by_name(c->mesh, "tp", &c->tp));
  char name[256] = "";
  if (nn_cuda_use_device(c->cuda_dev, name, sizeof name) != 0)
    return cuda_fail(t, "selecting the GPU");
  if (t->print) printf("device: cuda:%d (%s)\n", c->cuda_dev, name);
  snprintf(t->model_note, sizeof t->model_note,
           "; module tree on the host, the model on cuda:%d", c->cuda_dev);
  return 0;
}

static int dev_buffer(trainer *t, float **p, int64_t n, const char *kind,
                      int i) {
  char what[160];
  snprintf(what, sizeof what, "%s of '%s'", kind, t->fqn[i]);
  void *v = NULL;
  if (nn_cuda_alloc(&v, sizeof(float) * (size_t)n, what) != 0)
    return ex_fail(&t->err, "%s", nn_cuda_last_error());
  *p = v;
  ((cuda_state *)t->dev)->state_bytes += (int64_t)sizeof(float) * n;
  return 0;
}

/* Local: device parameters (the host tree's initial values), gradients,
 * moments, the model. */
static int cuda_setup(trainer *t) {
  cuda_state *c = t->dev;
  t->reduce_comm = c->dp;
  c->gown = calloc((size_t)t->np, sizeof *c->gown);
  if (c->gown == NULL) return ex_fail(&t->err, "out of memory");
  for (int i = 0; i < t->np; i++) {
    const tpdp_tensor *host = tpdp_param_tensor(t->params[i]);
    int64_t n = tpdp_tensor_numel(host);
    float *g = NULL;
    if (dev_buffer(t, &t->P[i], n, "the parameter", i) != 0 ||
        dev_buffer(t, &c->gown[i], n, "the gradient", i) != 0 ||
        dev_buffer(t, &t->m1[i], n, "AdamW's exp_avg", i) != 0 ||
        dev_buffer(t, &t->m2[i], n, "AdamW's exp_avg_sq", i) != 0)
      return -1;
    g = t->G[i] = c->gown[i];
    if (nn_cuda_to_device(t->P[i], host->data, sizeof(float) * (size_t)n) != 0)
      return cuda_fail(t, "copying the parameters to the GPU");
    TRY(tpdp_tensor_init(&t->rparams[i].param, t->P[i], TPDP_F32, t->device,
                         host->ndim, host->shape));
    TRY(tpdp_tensor_init(&t->rparams[i].grad, g, TPDP_F32, t->device,
                         host->ndim, host->shape));
  }
  if (gpt2_cuda_model_init(&c->model, &t->dims, t->P, t->G, t->tp_rank, t->o.tp,
                           t->o.tf32) != 0)
    return ex_fail(&t->err, "%s", nn_cuda_last_error());
  c->model_ready = 1;
  t->grad_stream = c->model.stream;
  /* Checkpoints see the device tensors: their specs say so (ckpt/ stages
   * them through host memory). */
  t->state_specs = calloc((size_t)t->np, sizeof *t->state_specs);
  if (t->state_specs == NULL) return ex_fail(&t->err, "out of memory");
  for (int i = 0; i < t->np; i++) {
    const tpdp_spec *hs = (const tpdp_spec *)tpdp_param_spec(t->params[i]);
    if (hs == NULL) continue; /* replicated: a plain tensor */
    const tpdp_mesh *mesh = tpdp_spec_mesh(hs);
    TRY(tpdp_spec_create(mesh, tpdp_spec_placements(hs), tpdp_mesh_ndim(mesh),
                         tpdp_spec_ndim(hs), tpdp_spec_global_shape(hs),
                         TPDP_F32, t->device, &t->state_specs[i]));
  }
  if (t->dims.sp) {
    c->tlm = (t->dims.T + t->o.tp - 1) / t->o.tp;
    int64_t one = (int64_t)t->dims.B * c->tlm * t->c.n_embd;
    void *a = NULL, *b = NULL;
    if (nn_cuda_alloc(&a, sizeof(float) * (size_t)(one * t->o.tp),
                      "the sequence-parallel buffers") != 0 ||
        nn_cuda_alloc(&b, sizeof(float) * (size_t)one,
                      "the sequence-parallel buffers") != 0) {
      nn_cuda_free(a);
      return ex_fail(&t->err, "%s", nn_cuda_last_error());
    }
    c->sp_all = a;
    c->sp_one = b;
  }
  c->ops = (gpt2_cuda_ops){t, op_allreduce, op_seq_gather,
                           op_seq_reduce_scatter, trainer_grad_ready};
  return 0;
}

static int cuda_forward(trainer *t, const ex_batch *batch, float loss_scale) {
  cuda_state *c = t->dev;
  if (gpt2_cuda_forward(&c->model, batch->tokens, batch->tokens + 1, loss_scale,
                        &c->ops, &t->model_tm) == 0)
    return 0;
  /* a callback's failure has its own message in t->err */
  return t->err.msg[0] ? -1 : cuda_fail(t, "the forward");
}

static int cuda_backward(trainer *t) {
  cuda_state *c = t->dev;
  if (gpt2_cuda_backward(&c->model, &c->ops, &t->model_tm) == 0) return 0;
  return t->err.msg[0] ? -1 : cuda_fail(t, "the backward");
}

/* The reducer's broadcast, reductions and averaging run on the dp
 * communicator's stream; the model's reads of them wait on the GPU. */
static int cuda_wait_dp(trainer *t) {
  cuda_state *c = t->dev;
  if (nn_cuda_stream_wait(c->model.stream, tpdp_comm_nccl_stream(c->dp)) != 0)
    return cuda_fail(t, "ordering the model after the reducer");
  return 0;
}

static int cuda_optimizer_step(trainer *t, int step) {
  cuda_state *c = t->dev;
  const nn_adamw_opts *a = &t->o.adamw;
  for (int i = 0; i < t->np; i++)
    if (nn_cuda_adamw(t->P[i], t->G[i], t->m1[i], t->m2[i],
                      tpdp_tensor_numel(&t->rparams[i].param), a,
                      t->info[i].decay ? t->o.weight_decay : 0.0, step,
                      c->model.stream) != 0)
      return cuda_fail(t, "AdamW");
  return 0;
}

static int cuda_loss(trainer *t, double *loss_sum) {
  cuda_state *c = t->dev;
  if (gpt2_cuda_loss(&c->model, loss_sum) != 0) return cuda_fail(t, "the loss");
  return 0;
}

static int cuda_finish(trainer *t) {
  cuda_state *c = t->dev;
  if (c->model_ready && nn_cuda_stream_sync(c->model.stream) != 0)
    return cuda_fail(t, "waiting for the GPU");
  return 0;
}

/* The trained device parameters into the host tree's shards. */
static int cuda_params_to_host(trainer *t) {
  for (int i = 0; i < t->np; i++) {
    const tpdp_tensor *host = tpdp_param_tensor(t->params[i]);
    if (nn_cuda_to_host(host->data, t->P[i], tpdp_tensor_nbytes(host)) != 0)
      return cuda_fail(t, "copying the parameters from the GPU");
  }
  return 0;
}

static void cuda_print_time(const trainer *t, const ex_times *tm, double comm,
                            double data) {
  const cuda_state *c = t->dev;
  const double compute = t->model_tm.compute - t->model_tm0.compute;
  const double tp_comm = t->model_tm.tp_comm - t->model_tm0.tp_comm;
  printf(
      "time (host side; the GPU runs asynchronously, the reducer's finalize "
      "waits for it): queueing the model %.3f s (tp collectives %.3f s), dp "
      "reduction %.3f s (collectives %.3f, waiting for the GPU %.3f), "
      "optimizer %.3f s\n",
      compute + tp_comm, tp_comm, comm + data, comm, data, tm->optim);
  printf(
      "gpu memory (cuda:%d): parameters, gradients and AdamW moments %.3f "
      "GiB, activations %.3f GiB\n",
      c->cuda_dev, (double)c->state_bytes / (1 << 30),
      (double)gpt2_cuda_activation_bytes(&t->dims) / (1 << 30));
}

static void cuda_release(trainer *t) {
  cuda_state *c = t->dev;
  if (c == NULL) return;
  if (c->model_ready) gpt2_cuda_model_free(&c->model);
  for (int i = 0; i < t->np; i++) {
    if (t->P) nn_cuda_free(t->P[i]);
    if (t->m1) nn_cuda_free(t->m1[i]);
    if (t->m2) nn_cuda_free(t->m2[i]);
    if (c->gown) nn_cuda_free(c->gown[i]);
  }
  free(c->gown);
  for (int i = 0; t->state_specs && i < t->np; i++)
    tpdp_spec_destroy(t->state_specs[i]);
  free(t->state_specs);
  t->state_specs = NULL;
  nn_cuda_free(c->sp_all);
  nn_cuda_free(c->sp_one);
  tpdp_mesh_destroy(c->mesh);
  tpdp_comm_destroy(c->nccl);
  free(c);
  t->dev = NULL;
}

const ex_backend gpt2_cuda_backend = {
    .tree_holds_model = 0,
    .open = cuda_open,
    .setup = cuda_setup,
    .forward = cuda_forward,
    .backward = cuda_backward,
    .wait_dp = cuda_wait_dp,
    .optimizer_step = cuda_optimizer_step,
    .loss = cuda_loss,
    .finish = cuda_finish,
    .params_to_host = cuda_params_to_host,
    .print_time = cuda_print_time,
    .release = cuda_release,
};
