// SPDX-License-Identifier: BSD-3-Clause
/*
 * train_mlp --device cuda (built with --config=cuda only). One GPU per rank:
 *  - an NCCL communicator over the MPI world (tpdp_comm_create_nccl; its
 *    GPU is the local rank; more local ranks than GPUs is an error) and
 *    the dp x tp mesh over it, so both mesh dims are NCCL communicators
 *    over device memory;
 *  - the module tree stays in host memory: tpdp_parallelize slices the
 *    host tensors (no communication) and tpdp_pre_dp_transform and the
 *    forward hooks work on those host shards (bookkeeping only: the model
 *    reads the device copies). Each local shard is copied once to the GPU;
 *    the model (mlp_cuda.cu) and AdamW run there on the model's stream;
 *  - TP collectives: tpdp_allreduce_async on the tp communicator of the
 *    parallelized modules (tpdp_tp_module_comm), ordered after the model
 *    stream (tpdp_comm_order_after) and the stream then ordered after the
 *    collective (tpdp_work_wait_stream): no host synchronisation;
 *  - DP: the reducer over the mesh's NCCL dp communicator with device
 *    parameters and gradients and producer_stream = the model stream;
 *  - --zero 1-3: the tree moves to the GPU before the pre-DP transform
 *    (place_tree: each local shard copied once, under a spec naming the
 *    GPU), and the fully sharded units shard those device tensors over the
 *    dp communicator (NCCL), their copies and collectives ordered on the
 *    model stream (options.stream); the model's block events call the
 *    units' hooks and its pointers follow the tree (t->views), as on the
 *    CPU. AdamW's moments are sized as the shards;
 *  - --check copies the trained device shards to the host and assembles
 *    sharded parameters by a zero-padded allreduce (sum) over the tp
 *    communicator on the GPU, then compares with the CPU reference.
 * A build without MPI (tpdp_init answering TPDP_ERR_UNSUPPORTED) runs a
 * single rank (--dp 1 --tp 1) on tpdp_comm_create_nccl(NULL, ...).
 */
#include <stdlib.h>
#include <string.h>

#include "examples/train_mlp/mlp_cuda.h"
#include "examples/train_mlp/train.h"
#include "tpdp/tp.h"

typedef struct {
  tpdp_comm *comm; /* the TP communicator (NCCL) */
  tpdp_device device;
  trainer *t;     /* its err gets a failed collective's message */
  double seconds; /* host time spent queueing the collectives */
} cuda_tp_ctx;

typedef struct {
  int cuda_dev;
  tpdp_device dev;
  mlp_cuda_model model;
  cuda_tp_ctx tp;
  float **m1, **m2; /* AdamW moments (device) */
  void **gown;      /* first gradient buffers (the reducer's buckets
                         replace them in t->grad) */
  void **tree_mem;  /* --zero: the tree's device tensors and gradients
                         (2 per parameter) as place_tree made them; the
                         units' shards replace them */
  double *d_loss;   /* the loss sum on the device, for the dp allreduce */
  double loss_sum;  /* the last forward's (host) */
} cuda_state;

/* A failed nn_cuda call: its name and CUDA's message into t->err, and
 * return -1 (the CUDA counterpart of TRY). */
#define CUDA_OK(call)                                                        \
  do {                                                                       \
    if ((call) != 0)                                                         \
      return ex_fail(&t->err, "%s failed: %s", #call, nn_cuda_last_error()); \
  } while (0)

static int tp_allreduce_cuda(int kind, int layer, float *data, int64_t n,
                             void *stream, void *vctx) {
  (void)kind;
  (void)layer;
  cuda_tp_ctx *c = vctx;
  double t0 = ex_now();
  tpdp_tensor v;
  tpdp_work *work = NULL;
  tpdp_status st = tpdp_tensor_init(&v, data, TPDP_F32, c->device, 1, &n);
  if (st == TPDP_SUCCESS) st = tpdp_comm_order_after(c->comm, stream);
  if (st == TPDP_SUCCESS)
    st = tpdp_allreduce_async(c->comm, &v, &v, TPDP_OP_SUM, &work);
  if (st == TPDP_SUCCESS) st = tpdp_work_wait_stream(work, stream);
  c->seconds += ex_now() - t0;
  if (st == TPDP_SUCCESS) return 0;
  ex_tpdp_fail(&c->t->err, "tpdp_allreduce_async (tp)", st);
  return 1;
}

static int cuda_open(trainer *t) {
  cuda_state *c = calloc(1, sizeof *c);
  if (!c) return ex_fail(&t->err, "out of memory");
  t->dev = c;
  /* The mesh goes over this NCCL communicator (t->own_comm). */
  TRY(tpdp_comm_create_nccl(t->world, -1, &t->own_comm));
  c->cuda_dev = tpdp_comm_cuda_device(t->own_comm);
  c->dev = (tpdp_device){TPDP_DEVICE_CUDA, c->cuda_dev};
  char dev_name[256] = "";
  CUDA_OK(nn_cuda_use_device(c->cuda_dev, dev_name, sizeof dev_name));
  if (t->rank == 0) {
    printf("device: cuda:%d (%s)\n", c->cuda_dev, dev_name);
    fflush(stdout);
  }
  if (t->o.zero > 0)
    snprintf(t->model_note, sizeof t->model_note,
             "; module tree and units on cuda:%d", c->cuda_dev);
  else
    snprintf(t->model_note, sizeof t->model_note,
             "; module tree on the host, parameters copied to cuda:%d",
             c->cuda_dev);
  return 0;
}

/* --zero: each local shard (host, as tpdp_parallelize sliced it) copied to
 * the GPU and made the parameter's tensor, with a zeroed gradient beside it
 * and, for TP-sharded parameters, a spec of the same placements that names
 * the GPU (the pre-DP transform validates tensors against their specs). */
static int cuda_place_tree(trainer *t) {
  cuda_state *c = t->dev;
  int np = t->tree.nparams;
  c->tree_mem = calloc(2 * (size_t)np, sizeof *c->tree_mem);
  t->tree_specs = calloc((size_t)np, sizeof *t->tree_specs);
  if (!c->tree_mem || !t->tree_specs) return ex_fail(&t->err, "out of memory");
  for (int i = 0; i < np; i++) {
    tpdp_param *p = t->tree.params[i];
    const tpdp_tensor *host = tpdp_param_tensor(p);
    size_t bytes = tpdp_tensor_nbytes(host);
    CUDA_OK(nn_cuda_alloc(&c->tree_mem[2 * i], bytes, "a parameter"));
    CUDA_OK(nn_cuda_alloc(&c->tree_mem[2 * i + 1], bytes, "a gradient"));
    CUDA_OK(nn_cuda_to_device(c->tree_mem[2 * i], host->data, bytes));
    tpdp_tensor dt, dg;
    TRY(tpdp_tensor_init(&dt, c->tree_mem[2 * i], host->dtype, c->dev,
                         host->ndim, host->shape));
    dg = dt;
    dg.data = c->tree_mem[2 * i + 1];
    const tpdp_spec *hs = (const tpdp_spec *)tpdp_param_spec(p);
    if (hs != NULL) {
      TRY(tpdp_spec_create(t->mesh, tpdp_spec_placements(hs),
                           tpdp_mesh_ndim(t->mesh), tpdp_spec_ndim(hs),
                           tpdp_spec_global_shape(hs), tpdp_spec_dtype(hs),
                           c->dev, &t->tree_specs[i]));
      TRY(tpdp_param_set_spec(p, (const struct tpdp_spec *)t->tree_specs[i]));
    }
    TRY(tpdp_param_set_tensor(p, &dt));
    TRY(tpdp_param_set_grad(p, &dg));
  }
  return 0;
}

static int cuda_setup(trainer *t) {
  cuda_state *c = t->dev;
  /* The TP communicator the parallelized modules use (the mesh's tp dim). */
  tpdp_comm *tp_comm = NULL;
  TRY(tpdp_mesh_dim_comm_by_name(t->mesh, "tp", &tp_comm));
  if (t->o.layers > 0) {
    tpdp_module *fc1 = NULL;
    TRY(tpdp_module_get_submodule(t->tree.root, "layers.0.fc1", &fc1));
    TRY(tpdp_tp_module_comm(fc1, &tp_comm));
  }
  c->tp = (cuda_tp_ctx){tp_comm, c->dev, t, 0};

  int np = t->tree.nparams;
  c->m1 = calloc((size_t)np, sizeof *c->m1);
  c->m2 = calloc((size_t)np, sizeof *c->m2);
  c->gown = calloc((size_t)np, sizeof *c->gown);
  if (!c->m1 || !c->m2 || !c->gown) return ex_fail(&t->err, "out of memory");
  for (int i = 0; i < np; i++) {
    if (t->o.zero > 0) {
      /* The tree is on the GPU (place_tree); the moments come at the first
       * step, sized as the shards. */
      t->rparams[i].param = *tpdp_param_tensor(t->tree.params[i]);
      t->rparams[i].grad = *tpdp_param_grad(t->tree.params[i]);
      t->param[i] = t->rparams[i].param.data;
      t->grad[i] = t->rparams[i].grad.data;
      continue;
    }
    const tpdp_tensor *host = tpdp_param_tensor(t->tree.params[i]);
    size_t bytes = sizeof(float) * (size_t)tpdp_tensor_numel(host);
    void *p = NULL, *g = NULL, *a = NULL, *b = NULL;
    CUDA_OK(nn_cuda_alloc(&p, bytes, "a parameter"));
    t->param[i] = p;
    CUDA_OK(nn_cuda_alloc(&g, bytes, "a gradient"));
    t->grad[i] = g;
    c->gown[i] = g;
    CUDA_OK(nn_cuda_alloc(&a, bytes, "AdamW's exp_avg"));
    c->m1[i] = a;
    CUDA_OK(nn_cuda_alloc(&b, bytes, "AdamW's exp_avg_sq"));
    c->m2[i] = b;
    CUDA_OK(nn_cuda_to_device(p, host->data, bytes));
    TRY(tpdp_tensor_init(&t->rparams[i].param, p, TPDP_F32, c->dev, host->ndim,
                         host->shape));
    TRY(tpdp_tensor_init(&t->rparams[i].grad, g, TPDP_F32, c->dev, host->ndim,
                         host->shape));
  }
  CUDA_OK(mlp_cuda_model_init(&c->model, &t->s, t->f_local, t->batch_local,
                              t->param, t->grad));
  t->grad_stream = c->model.stream;
  if (t->o.zero > 0) {
    c->model.block_fn = train_block_event;
    c->model.block_ctx = t;
  }
  /* The host-to-device copies above (legacy default stream) are complete
   * before the reducer's broadcast reads the parameters on its stream. */
  CUDA_OK(nn_cuda_stream_sync(NULL));
  void *dl = NULL;
  CUDA_OK(nn_cuda_alloc(&dl, sizeof(double), "the loss"));
  c->d_loss = dl;
  return 0;
}

/* AdamW's moments of parameter i, sized as the tensor the tree holds (the
 * shard under --zero), made zeroed at first use. */
static int cuda_moments(trainer *t, int i) {
  cuda_state *c = t->dev;
  if (c->m1[i] != NULL) return 0;
  size_t bytes = tpdp_tensor_nbytes(tpdp_param_tensor(t->tree.params[i]));
  void *a = NULL, *b = NULL;
  CUDA_OK(nn_cuda_alloc(&a, bytes, "AdamW's exp_avg"));
  c->m1[i] = a;
  CUDA_OK(nn_cuda_alloc(&b, bytes, "AdamW's exp_avg_sq"));
  c->m2[i] = b;
  return 0;
}

/* A model call failed: a callback's own message, else CUDA's. */
static int model_failed(trainer *t, const char *what) {
  if (t->err.msg[0]) return -1;
  return ex_fail(&t->err, "%s failed: %s", what, nn_cuda_last_error());
}

/* The forward waits for its loss (copied to the host). */
static int cuda_forward(trainer *t, const ex_batch *batch, float loss_scale) {
  cuda_state *c = t->dev;
  if (mlp_cuda_forward(&c->model, batch->x, batch->labels, loss_scale,
                       tp_allreduce_cuda, &c->tp, &c->loss_sum) != 0)
    return model_failed(t, "mlp_cuda_forward");
  return 0;
}

static int cuda_loss(trainer *t, double *loss_sum) {
  *loss_sum = ((cuda_state *)t->dev)->loss_sum;
  return 0;
}

static int cuda_backward(trainer *t) {
  cuda_state *c = t->dev;
  /* --zero: the units reduce at the end of each block's backward. */
  mlp_grad_ready_fn ready = t->o.zero > 0 ? NULL : train_grad_ready;
  if (mlp_cuda_backward(&c->model, tp_allreduce_cuda, &c->tp, ready, t) != 0)
    return model_failed(t, "mlp_cuda_backward");
  return 0;
}

/* The reducer's broadcast, reductions and averaging run on the dp
 * communicator's stream; the model's reads of them wait on the GPU. */
static int cuda_wait_dp(trainer *t) {
  cuda_state *c = t->dev;
  CUDA_OK(
      nn_cuda_stream_wait(c->model.stream, tpdp_comm_nccl_stream(t->dp_comm)));
  return 0;
}

static int cuda_optimizer_step(trainer *t, int step) {
  cuda_state *c = t->dev;
  const nn_adamw_opts ao = mlp_adamw_opts(&t->o);
  for (int i = 0; i < t->tree.nparams; i++) {
    /* The parameter as the tree holds it now: under --zero its shard. */
    const tpdp_tensor *p = t->o.zero > 0 ? tpdp_param_tensor(t->tree.params[i])
                                         : &t->rparams[i].param;
    if (cuda_moments(t, i) != 0) return -1;
    CUDA_OK(nn_cuda_adamw(t->param[i], t->grad[i], c->m1[i], c->m2[i],
                          tpdp_tensor_numel(p), &ao, MLP_WEIGHT_DECAY, step,
                          c->model.stream));
  }
  return 0;
}

/* On the GPU: the dp communicator moves device memory. */
static int cuda_sum_over_dp(trainer *t, double *v) {
  cuda_state *c = t->dev;
  CUDA_OK(nn_cuda_to_device(c->d_loss, v, sizeof *v));
  tpdp_tensor lt;
  int64_t one = 1;
  TRY(tpdp_tensor_init(&lt, c->d_loss, TPDP_F64, c->dev, 1, &one));
  TRY(tpdp_comm_order_after(t->dp_comm, NULL));
  TRY(tpdp_allreduce(t->dp_comm, &lt, &lt, TPDP_OP_SUM));
  CUDA_OK(nn_cuda_stream_wait(NULL, tpdp_comm_nccl_stream(t->dp_comm)));
  CUDA_OK(nn_cuda_to_host(v, c->d_loss, sizeof *v));
  return 0;
}

static int cuda_finish(trainer *t) {
  cuda_state *c = t->dev;
  CUDA_OK(nn_cuda_stream_sync(c->model.stream));
  return 0;
}

/* The moments live on the GPU beside the parameters: device views. */
static int cuda_moment_views(trainer *t, int i, tpdp_tensor *m1,
                             tpdp_tensor *m2) {
  cuda_state *c = t->dev;
  const tpdp_tensor *p = &t->rparams[i].param;
  TRY(tpdp_tensor_init(m1, c->m1[i], TPDP_F32, c->dev, p->ndim, p->shape));
  TRY(tpdp_tensor_init(m2, c->m2[i], TPDP_F32, c->dev, p->ndim, p->shape));
  return 0;
}

static void cuda_print_time(const trainer *t, const ex_times *tm, double comm,
                            double data) {
  const cuda_state *c = t->dev;
  (void)comm;
  (void)data;
  printf(
      "time (host side; GPU work is asynchronous, the forward waits for "
      "its loss): model %.3f s (queueing tp collectives %.3f s), dp "
      "finalize %.3f s, optimizer %.3f s\n",
      tm->model, c->tp.seconds, tm->finalize, tm->optim);
}

/* out[n] (host) summed over the tp ranks, through device buffer d. */
static int tp_sum_through(trainer *t, void *d, float *out, int64_t n) {
  cuda_state *c = t->dev;
  CUDA_OK(nn_cuda_to_device(d, out, sizeof(float) * (size_t)n));
  tpdp_tensor dt;
  TRY(tpdp_tensor_init(&dt, d, TPDP_F32, c->dev, 1, &n));
  /* the copy above ran on the legacy default stream */
  TRY(tpdp_comm_order_after(c->tp.comm, NULL));
  TRY(tpdp_allreduce(c->tp.comm, &dt, &dt, TPDP_OP_SUM));
  CUDA_OK(nn_cuda_stream_wait(NULL, tpdp_comm_nccl_stream(c->tp.comm)));
  CUDA_OK(nn_cuda_to_host(out, d, sizeof(float) * (size_t)n));
  return 0;
}

/* Parameter i's trained local values (host copy `src`) at their global
 * offset in out[n], zero elsewhere, then summed over the tp ranks on the
 * GPU: the full value. */
static int assemble(trainer *t, int i, float *src, float *out, int64_t n) {
  const tpdp_param *p = t->tree.params[i];
  const tpdp_tensor *lt = tpdp_param_tensor(p);
  const void *trained = t->o.zero > 0 ? lt->data : t->param[i];
  size_t lbytes = sizeof(float) * (size_t)tpdp_tensor_numel(lt);
  CUDA_OK(nn_cuda_to_host(src, trained, lbytes));
  const tpdp_spec *spec = (const tpdp_spec *)tpdp_param_spec(p);
  int sharded = 0;
  if (spec != NULL) {
    const tpdp_placement *pl = tpdp_spec_placements(spec);
    for (int d = 0; d < tpdp_mesh_ndim(t->mesh); d++)
      if (pl[d].kind != TPDP_PLACEMENT_REPLICATE) sharded = 1;
  }
  if (!sharded) {
    memcpy(out, src, lbytes);
    return 0;
  }
  int ndim = tpdp_spec_ndim(spec);
  const int64_t *gshape = tpdp_spec_global_shape(spec);
  int64_t lshape[TPDP_MAX_DIMS], loff[TPDP_MAX_DIMS];
  TRY(tpdp_spec_local_shape(spec, tpdp_mesh_rank(t->mesh), lshape, loff));
  int64_t cols = gshape[ndim - 1];
  int64_t lrows = ndim == 2 ? lshape[0] : 1, lcols = lshape[ndim - 1];
  int64_t roff = ndim == 2 ? loff[0] : 0, coff = loff[ndim - 1];
  memset(out, 0, sizeof(float) * (size_t)n);
  for (int64_t r = 0; r < lrows; r++)
    for (int64_t k = 0; k < lcols; k++)
      out[(r + roff) * cols + k + coff] = src[r * lcols + k];
  void *d = NULL;
  CUDA_OK(nn_cuda_alloc(&d, sizeof(float) * (size_t)n, "a gathered parameter"));
  int rc = tp_sum_through(t, d, out, n);
  nn_cuda_free(d);
  return rc;
}

/* The full value of parameter i into host memory `out` (collective over
 * the tp communicator for TP-sharded parameters): the trained device shard
 * (under --zero the tree's, summoned whole over dp), assembled. */
static int cuda_gather_param(trainer *t, int i, float *out, int64_t n) {
  const tpdp_tensor *lt = tpdp_param_tensor(t->tree.params[i]);
  float *src = malloc(sizeof(float) * (size_t)tpdp_tensor_numel(lt) + 1);
  if (src == NULL) return ex_fail(&t->err, "out of memory");
  int rc = assemble(t, i, src, out, n);
  free(src);
  return rc;
}

static void cuda_release(trainer *t) {
  cuda_state *c = t->dev;
  if (!c) return;
  mlp_cuda_model_free(&c->model);
  for (int i = 0; i < t->tree.nparams; i++) {
    /* under --zero param[] points into the units' buffers */
    if (t->param && t->o.zero == 0) nn_cuda_free(t->param[i]);
    if (c->gown) nn_cuda_free(c->gown[i]);
    if (c->tree_mem) {
      nn_cuda_free(c->tree_mem[2 * i]);
      nn_cuda_free(c->tree_mem[2 * i + 1]);
    }
    if (c->m1) nn_cuda_free(c->m1[i]);
    if (c->m2) nn_cuda_free(c->m2[i]);
  }
  nn_cuda_free(c->d_loss);
  free(c->gown);
  free(c->tree_mem);
  free(c->m1);
  free(c->m2);
  free(c);
  t->dev = NULL;
}

const ex_backend mlp_cuda_backend = {
    .tree_holds_model = 0,
    .runs_without_mpi = 1,
    .open = cuda_open,
    .place_tree = cuda_place_tree,
    .setup = cuda_setup,
    .forward = cuda_forward,
    .backward = cuda_backward,
    .wait_dp = cuda_wait_dp,
    .optimizer_step = cuda_optimizer_step,
    .loss = cuda_loss,
    .sum_over_dp = cuda_sum_over_dp,
    .finish = cuda_finish,
    .print_time = cuda_print_time,
    .moment_views = cuda_moment_views,
    .gather_param = cuda_gather_param,
    .release = cuda_release,
};
