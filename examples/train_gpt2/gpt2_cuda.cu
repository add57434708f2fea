// SPDX-License-Identifier: BSD-3-Clause
// GPT-2 for one TP rank on a GPU: gpt2.c's forward and backward with the
// same buffers and the same order of operations, on cuBLAS and the kernels
// of nn_cuda.h (see gpt2_cuda.h).
//
// Row-major matrices through column-major cuBLAS: a row-major [r, c]
// buffer read column-major is its [c, r] transpose, so a row-major product
// C = A B is the column-major C^T = B^T A^T.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "examples/train_gpt2/gpt2_cuda.h"

static const float LN_EPS = 1e-5f;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ------------------------------------------------------------ sizes

static int64_t logits_pitch(const gpt2_dims *d) {
  return ((int64_t)d->vl + 63) / 64 * 64;  // aligned rows for cuBLAS
}

// gpt2.h's buffers (the logits pitched), the attention backward's
// scratch for all rows at once, the column sums' scratch and the
// cross-entropy's per-row maxima.
#define GPT2_CUDA_BUFFERS(X)                  \
  GPT2_BUFFERS(X, s, d->sp, logits_pitch(d))  \
  X(dscore, s.B *s.hl *s.T *s.T)              \
  X(colsum_scratch, colsum_scratch_floats(s)) \
  X(row_max, s.N)                             \
  X(row_gmax, s.N)

static int64_t colsum_scratch_floats(const gpt2_sizes &s) {
  // The widest column sum: LayerNorm's two over C, a bias over 3E or F.
  int64_t w = 2 * s.C;
  if (3 * s.E > w) w = 3 * s.E;
  if (s.F > w) w = s.F;
  int64_t rows = s.N > s.Nl ? s.N : s.Nl;
  return nn_cuda_colsum_scratch_floats((int)rows, (int)w, 1);
}

extern "C" int64_t gpt2_cuda_activation_bytes(const gpt2_dims *d) {
  gpt2_sizes s = gpt2_sizes_of(d);
  int64_t n = 0;
#define ADD(name, count) n += (int64_t)(count);
  GPT2_CUDA_BUFFERS(ADD)
#undef ADD
  // doubles: pair (2N), row_loss (N), loss (1); int32: ids, targets,
  // order, seg_row (N each) and seg_start (N + 1)
  return 4 * n + 8 * (3 * s.N + 1) + 4 * (5 * s.N + 1);
}

template <typename T>
static int dev_alloc(T **p, int64_t count, const char *what) {
  void *v = NULL;
  char name[96];
  snprintf(name, sizeof name, "the activations' '%s'", what);
  NN_TRY(nn_cuda_alloc(&v, (size_t)count * sizeof(T), name));
  *p = (T *)v;
  return 0;
}

template <typename T>
static int host_alloc(T **p, int64_t count, const char *what) {
  void *v = NULL;
  NN_TRY(nn_cuda_alloc_host(&v, (size_t)count * sizeof(T), what));
  *p = (T *)v;
  return 0;
}

static int model_alloc(gpt2_cuda_model *m) {
  const gpt2_dims *d = &m->d;
  gpt2_sizes s = gpt2_sizes_of(d);
#define ALLOC(name, count) NN_TRY(dev_alloc(&m->name, (count), #name));
  GPT2_CUDA_BUFFERS(ALLOC)
#undef ALLOC
  NN_TRY(dev_alloc(&m->pair, 2 * s.N, "pair"));
  NN_TRY(dev_alloc(&m->row_loss, s.N, "row_loss"));
  NN_TRY(dev_alloc(&m->loss_dev, 1, "loss"));
  NN_TRY(dev_alloc(&m->ids, s.N, "ids"));
  NN_TRY(dev_alloc(&m->targets, s.N, "targets"));
  NN_TRY(dev_alloc(&m->order, s.N, "order"));
  NN_TRY(dev_alloc(&m->seg_start, s.N + 1, "seg_start"));
  NN_TRY(dev_alloc(&m->seg_row, s.N, "seg_row"));
  // staging: ids then targets in one buffer (one copy), the plan, the loss
  NN_TRY(host_alloc(&m->h_ids, 2 * s.N, "staged token ids"));
  NN_TRY(host_alloc(&m->h_order, s.N, "the embedding backward's plan"));
  NN_TRY(host_alloc(&m->h_seg_start, s.N + 1, "the embedding backward's plan"));
  NN_TRY(host_alloc(&m->h_seg_row, s.N, "the embedding backward's plan"));
  NN_TRY(host_alloc(&m->h_row_work, s.V, "the embedding backward's plan"));
  NN_TRY(host_alloc(&m->h_loss, 1, "the loss"));
  NN_TRY(nn_cuda_event_create(&m->uploaded));
  NN_TRY(nn_cuda_event_create(&m->loss_ready));
  return 0;
}

extern "C" int gpt2_cuda_model_init(gpt2_cuda_model *m, const gpt2_dims *d,
                                    float **P, float **G, int tp_rank,
                                    int tp_size, int tf32) {
  memset(m, 0, sizeof *m);
  m->d = *d;
  m->P = P;
  m->G = G;
  m->tp_rank = tp_rank;
  m->tp_size = tp_size;
  m->ldv = logits_pitch(d);
  int rc = nn_cuda_stream_create(&m->stream);
  if (rc == 0) rc = nn_cuda_blas_create(&m->blas, m->stream, tf32);
  if (rc == 0) rc = model_alloc(m);
  if (rc != 0) {
    gpt2_cuda_model_free(m);  // leaves the first failure's message
    return rc;
  }
  // Both events start as recorded, so the first waits return at once.
  NN_TRY(nn_cuda_event_record(m->uploaded, m->stream));
  NN_TRY(nn_cuda_event_record(m->loss_ready, m->stream));
  return 0;
}

extern "C" void gpt2_cuda_model_free(gpt2_cuda_model *m) {
  if (m->stream) nn_cuda_stream_sync(m->stream);
#define FREE(name, count) nn_cuda_free(m->name);
  GPT2_CUDA_BUFFERS(FREE)
#undef FREE
  void *dev[] = {m->pair,    m->row_loss, m->loss_dev,  m->ids,
                 m->targets, m->order,    m->seg_start, m->seg_row};
  for (size_t k = 0; k < sizeof dev / sizeof dev[0]; k++) nn_cuda_free(dev[k]);
  void *host[] = {m->h_ids,     m->h_order,    m->h_seg_start,
                  m->h_seg_row, m->h_row_work, m->h_loss};
  for (size_t k = 0; k < sizeof host / sizeof host[0]; k++)
    nn_cuda_free_host(host[k]);
  nn_cuda_event_destroy(m->uploaded);
  nn_cuda_event_destroy(m->loss_ready);
  nn_cuda_blas_destroy(m->blas);
  nn_cuda_stream_destroy(m->stream);
  memset(m, 0, sizeof *m);
}

// ------------------------------------------------------------ matmuls

// Y[N, out] = X[N, in] W[in, out] (+ b): Hugging Face's Conv1D.
static int conv1d_fwd(gpt2_cuda_model *m, const float *X, const float *W,
                      const float *b, float *Y, int64_t N, int64_t in,
                      int64_t out) {
  NN_TRY(nn_cuda_sgemm(m->blas, 0, 0, (int)out, (int)N, (int)in, 1.0f, W,
                       (int)out, X, (int)in, 0.0f, Y, (int)out));
  if (b) NN_TRY(nn_cuda_bias_add(Y, b, N, (int)out, m->stream));
  return 0;
}

// dX = dY W^T, dW = X^T dY, db = column sums of dY (each may be NULL).
static int conv1d_bwd(gpt2_cuda_model *m, const float *X, const float *W,
                      const float *dY, float *dX, float *dW, float *db,
                      int64_t N, int64_t in, int64_t out) {
  if (dX)
    NN_TRY(nn_cuda_sgemm(m->blas, 1, 0, (int)in, (int)N, (int)out, 1.0f, W,
                         (int)out, dY, (int)out, 0.0f, dX, (int)in));
  if (dW)
    NN_TRY(nn_cuda_sgemm(m->blas, 0, 1, (int)out, (int)in, (int)N, 1.0f, dY,
                         (int)out, X, (int)in, 0.0f, dW, (int)out));
  if (db)
    NN_TRY(
        nn_cuda_colsum(dY, db, (int)N, (int)out, m->colsum_scratch, m->stream));
  return 0;
}

// ------------------------------------------------------------ attention

// Causal attention of this rank's heads, per batch row b: S = scale q k^T
// for its hl heads in one batched product, the softmax over all rows, then
// y = P v (see gpt2.c's attention_fwd for the layout).
static int attention_fwd(gpt2_cuda_model *m, const float *qkv, float *att,
                         float *y) {
  const gpt2_dims *d = &m->d;
  const int T = d->T, hd = d->hd, E = d->hl * d->hd, ld = 3 * E, hl = d->hl;
  if (hl == 0) return 0;
  const float scale = 1.0f / sqrtf((float)hd);
  const int64_t TT = (int64_t)T * T;
  for (int b = 0; b < d->B; b++) {
    const float *q = qkv + (int64_t)b * T * ld;
    NN_TRY(nn_cuda_sgemm_batched(m->blas, 1, 0, T, T, hd, scale, q + E, ld, hd,
                                 q, ld, hd, 0.0f, att + b * hl * TT, T, TT,
                                 hl));
  }
  NN_TRY(nn_cuda_causal_softmax_fwd(att, (int64_t)d->B * hl * T, T, m->stream));
  for (int b = 0; b < d->B; b++) {
    const float *q = qkv + (int64_t)b * T * ld;
    NN_TRY(nn_cuda_sgemm_batched(m->blas, 0, 0, hd, T, T, 1.0f, q + 2 * E, ld,
                                 hd, att + b * hl * TT, T, TT, 0.0f,
                                 y + (int64_t)b * T * E, E, hd, hl));
  }
  return 0;
}

// dy [N, E] -> dqkv [N, 3E] (overwritten); dscore holds dP, then dS.
static int attention_bwd(gpt2_cuda_model *m, const float *qkv, const float *att,
                         const float *dy, float *dqkv) {
  const gpt2_dims *d = &m->d;
  const int T = d->T, hd = d->hd, E = d->hl * d->hd, ld = 3 * E, hl = d->hl;
  if (hl == 0) return 0;
  const float scale = 1.0f / sqrtf((float)hd);
  const int64_t TT = (int64_t)T * T;
  for (int b = 0; b < d->B; b++) {
    const float *q = qkv + (int64_t)b * T * ld;
    const float *g = dy + (int64_t)b * T * E;
    float *dq = dqkv + (int64_t)b * T * ld;
    // dP = dy v^T, dv = P^T dy
    NN_TRY(nn_cuda_sgemm_batched(m->blas, 1, 0, T, T, hd, 1.0f, q + 2 * E, ld,
                                 hd, g, E, hd, 0.0f, m->dscore + b * hl * TT, T,
                                 TT, hl));
    NN_TRY(nn_cuda_sgemm_batched(m->blas, 0, 1, hd, T, T, 1.0f, g, E, hd,
                                 att + b * hl * TT, T, TT, 0.0f, dq + 2 * E, ld,
                                 hd, hl));
  }
  NN_TRY(nn_cuda_causal_softmax_bwd(att, m->dscore, (int64_t)d->B * hl * T, T,
                                    m->stream));
  for (int b = 0; b < d->B; b++) {
    const float *q = qkv + (int64_t)b * T * ld;
    float *dq = dqkv + (int64_t)b * T * ld;
    const float *dS = m->dscore + b * hl * TT;
    // S = scale q k^T: dq = scale dS k, dk = scale dS^T q
    NN_TRY(nn_cuda_sgemm_batched(m->blas, 0, 0, hd, T, T, scale, q + E, ld, hd,
                                 dS, T, TT, 0.0f, dq, ld, hd, hl));
    NN_TRY(nn_cuda_sgemm_batched(m->blas, 0, 1, hd, T, T, scale, q, ld, hd, dS,
                                 T, TT, 0.0f, dq + E, ld, hd, hl));
  }
  return 0;
}

// ------------------------------------------------------------ TP

// Callbacks run with the clock paused; TP ones count as communication
// (host time spent queueing them).
#define CALL(t_, is_comm, expr)                \
  do {                                         \
    double c0_ = now();                        \
    int rc_ = (expr);                          \
    double dt_ = now() - c0_;                  \
    paused += dt_;                             \
    if (is_comm) (t_)->tp_comm += dt_;         \
    if (rc_ != 0) {                            \
      (t_)->compute += now() - start - paused; \
      return rc_;                              \
    }                                          \
  } while (0)

static int tp_sum(gpt2_cuda_model *m, const gpt2_cuda_ops *ops, float *buf,
                  int64_t n) {
  if (m->tp_size == 1 || n == 0) return 0;
  return ops->allreduce(ops->ctx, buf, n, 0, 0, m->stream);
}

// The sharded matmuls' input: the sequence shard gathered over TP (sp) or
// the activation itself.
static int gather_in(gpt2_cuda_model *m, const gpt2_cuda_ops *ops,
                     const float *x, float *full, const float **out) {
  if (!m->d.sp) {
    *out = x;
    return 0;
  }
  *out = full;
  return ops->seq_gather(ops->ctx, x, full, m->stream);
}

// The partial [N, C] output of a rowwise matmul summed over TP: in place,
// or into this rank's sequence shard (sp).
static int reduce_out(gpt2_cuda_model *m, const gpt2_cuda_ops *ops,
                      float *partial, float *shard, const float **out) {
  const gpt2_dims *d = &m->d;
  if (!d->sp) {
    *out = partial;
    return tp_sum(m, ops, partial, (int64_t)d->B * d->T * d->c.n_embd);
  }
  *out = shard;
  return ops->seq_reduce_scatter(ops->ctx, partial, shard, m->stream);
}

// ------------------------------------------------------------ forward

// The vocabulary-parallel loss of the logits [N, vl] (pitch ldv): per-row
// scalars summed over TP, the gradient in place, the loss sum queued to
// the host.
static int cross_entropy(gpt2_cuda_model *m, const gpt2_cuda_ops *ops,
                         float scale) {
  const gpt2_dims *d = &m->d;
  const int64_t N = (int64_t)d->B * d->T;
  float *gmax = m->tp_size > 1 ? m->row_gmax : m->row_max;
  NN_TRY(nn_cuda_xent_stats(m->logits, m->ldv, m->targets, N, d->v0, d->vl,
                            m->row_max, m->pair, m->stream));
  if (m->tp_size > 1) {
    NN_TRY(nn_cuda_copy_async(gmax, m->row_max, sizeof(float) * (size_t)N,
                              m->stream));
    NN_TRY(ops->allreduce(ops->ctx, gmax, N, 0, 1, m->stream));
    NN_TRY(nn_cuda_xent_rescale(m->row_max, gmax, m->pair, N, m->stream));
    NN_TRY(ops->allreduce(ops->ctx, m->pair, 2 * N, 1, 0, m->stream));
  }
  NN_TRY(nn_cuda_xent_grad(m->logits, m->ldv, m->targets, N, d->v0, d->vl, gmax,
                           m->pair, scale, m->row_loss, m->stream));
  NN_TRY(nn_cuda_sum_f64(m->row_loss, N, m->loss_dev, m->stream));
  NN_TRY(nn_cuda_copy_async(m->h_loss, m->loss_dev, sizeof(double), m->stream));
  NN_TRY(nn_cuda_event_record(m->loss_ready, m->stream));
  return 0;
}

extern "C" int gpt2_cuda_forward(gpt2_cuda_model *m, const int32_t *inputs,
                                 const int32_t *targets, float loss_scale,
                                 const gpt2_cuda_ops *ops, gpt2_timers *t) {
  const gpt2_dims *d = &m->d;
  const gpt2_sizes s = gpt2_sizes_of(d);
  const int64_t C = s.C, N = s.N, Nl = s.Nl, E = s.E, F = s.F;
  float **P = m->P;
  void *st = m->stream;
  double start = now(), paused = 0;
  m->inputs = inputs;
  m->loss_scale = loss_scale;

  // The ids and targets: staged (after the last upload was read), copied.
  NN_TRY(nn_cuda_event_sync(m->uploaded));
  memcpy(m->h_ids, inputs, sizeof(int32_t) * (size_t)N);
  memcpy(m->h_ids + N, targets, sizeof(int32_t) * (size_t)N);
  NN_TRY(nn_cuda_copy_async(m->ids, m->h_ids, sizeof(int32_t) * (size_t)N, st));
  NN_TRY(nn_cuda_copy_async(m->targets, m->h_ids + N,
                            sizeof(int32_t) * (size_t)N, st));
  NN_TRY(nn_cuda_event_record(m->uploaded, st));

  // embeddings: full rows (TP rank 0 adds the positions before the sum
  // over TP), then this rank's sequence shard (sp)
  float *x0 = d->sp ? m->x0 : m->resid;
  NN_TRY(nn_cuda_embedding_fwd(m->ids, N, P[GPT2_WTE], d->v0, d->vl,
                               m->tp_rank == 0 ? P[GPT2_WPE] : NULL, d->T,
                               (int)C, x0, st));
  CALL(t, 1, tp_sum(m, ops, x0, N * C));
  if (d->sp)
    NN_TRY(nn_cuda_copy_2d_async(
        m->resid, sizeof(float) * d->tl * C, x0 + (int64_t)d->t0 * C,
        sizeof(float) * d->T * C, sizeof(float) * d->tl * C, (size_t)d->B, st));

  for (int l = 0; l < d->c.n_layer; l++) {
    const int64_t o_l = (int64_t)l * Nl * C, o_g = (int64_t)l * N * C;
    float *x = m->resid + o_l, *r2 = m->resid2 + o_l;
    float *ln1 = m->ln1 + o_l, *ln2 = m->ln2 + o_l;
    float *st1 = m->ln1_stats + 2 * (int64_t)l * Nl;
    float *st2 = m->ln2_stats + 2 * (int64_t)l * Nl;
    float *qkv = m->qkv + (int64_t)l * N * 3 * E;
    float *att = m->att + (int64_t)l * s.B * s.hl * s.T * s.T;
    float *atty = m->atty + (int64_t)l * N * E;
    float *fch = m->fch + (int64_t)l * N * F,
          *fcg = m->fcg + (int64_t)l * N * F;
    const float *in = NULL, *red = NULL;

    NN_TRY(nn_cuda_layernorm_fwd(x, P[gpt2_block_param(l, GPT2_LN1_W)],
                                 P[gpt2_block_param(l, GPT2_LN1_B)], ln1, st1,
                                 st1 + Nl, (int)Nl, (int)C, LN_EPS, st));
    CALL(t, 1, gather_in(m, ops, ln1, d->sp ? m->ln1g + o_g : NULL, &in));
    NN_TRY(conv1d_fwd(m, in, P[gpt2_block_param(l, GPT2_QKV_W)],
                      P[gpt2_block_param(l, GPT2_QKV_B)], qkv, N, C, 3 * E));
    NN_TRY(attention_fwd(m, qkv, att, atty));
    NN_TRY(conv1d_fwd(m, atty, P[gpt2_block_param(l, GPT2_AO_W)], NULL, m->tmp,
                      N, E, C));
    CALL(t, 1, reduce_out(m, ops, m->tmp, m->tmp2, &red));
    NN_TRY(nn_cuda_residual(x, red, P[gpt2_block_param(l, GPT2_AO_B)], r2, Nl,
                            (int)C, st));

    NN_TRY(nn_cuda_layernorm_fwd(r2, P[gpt2_block_param(l, GPT2_LN2_W)],
                                 P[gpt2_block_param(l, GPT2_LN2_B)], ln2, st2,
                                 st2 + Nl, (int)Nl, (int)C, LN_EPS, st));
    CALL(t, 1, gather_in(m, ops, ln2, d->sp ? m->ln2g + o_g : NULL, &in));
    NN_TRY(conv1d_fwd(m, in, P[gpt2_block_param(l, GPT2_FC_W)],
                      P[gpt2_block_param(l, GPT2_FC_B)], fch, N, C, F));
    NN_TRY(nn_cuda_gelu_fwd(fch, fcg, N * F, st));
    NN_TRY(conv1d_fwd(m, fcg, P[gpt2_block_param(l, GPT2_MO_W)], NULL, m->tmp,
                      N, F, C));
    CALL(t, 1, reduce_out(m, ops, m->tmp, m->tmp2, &red));
    NN_TRY(nn_cuda_residual(r2, red, P[gpt2_block_param(l, GPT2_MO_B)],
                            m->resid + o_l + Nl * C, Nl, (int)C, st));
  }

  const int lnf = gpt2_lnf_param(&d->c);
  const float *xL = m->resid + (int64_t)d->c.n_layer * Nl * C, *in = NULL;
  NN_TRY(nn_cuda_layernorm_fwd(xL, P[lnf], P[lnf + 1], m->lnf, m->lnf_stats,
                               m->lnf_stats + Nl, (int)Nl, (int)C, LN_EPS, st));
  CALL(t, 1, gather_in(m, ops, m->lnf, m->lnfg, &in));
  // logits [N, vl] = in [N, C] wte^T (pitch ldv)
  NN_TRY(nn_cuda_sgemm(m->blas, 1, 0, d->vl, (int)N, (int)C, 1.0f, P[GPT2_WTE],
                       (int)C, in, (int)C, 0.0f, m->logits, (int)m->ldv));
  NN_TRY(cross_entropy(m, ops, loss_scale));
  t->compute += now() - start - paused;
  return 0;
}

extern "C" int gpt2_cuda_loss(gpt2_cuda_model *m, double *loss_sum) {
  NN_TRY(nn_cuda_event_sync(m->loss_ready));
  *loss_sum = *m->h_loss;
  return 0;
}

// ------------------------------------------------------------ backward

#define READY(i) CALL(t, 0, ops->grad_ready(ops->ctx, (i)))

// Sequence parallelism leaves the gradients of replicated parameters used
// on sequence shards partial: sum them over TP before they are final.
#define READY_REPLICATED(i)                         \
  do {                                              \
    if (d->sp) CALL(t, 1, tp_sum(m, ops, G[i], C)); \
    READY(i);                                       \
  } while (0)

// The embedding's backward plan for this step's ids, staged and copied.
static int upload_plan(gpt2_cuda_model *m, int *segments) {
  const gpt2_dims *d = &m->d;
  const int64_t N = (int64_t)d->B * d->T;
  NN_TRY(nn_cuda_event_sync(m->uploaded));
  nn_embedding_plan plan = {m->h_order, m->h_seg_start, m->h_seg_row, 0,
                            m->h_row_work};
  nn_embedding_plan_make(m->inputs, N, d->v0, d->vl, &plan);
  *segments = plan.segments;
  NN_TRY(nn_cuda_copy_async(m->order, m->h_order, sizeof(int32_t) * (size_t)N,
                            m->stream));
  NN_TRY(nn_cuda_copy_async(m->seg_start, m->h_seg_start,
                            sizeof(int32_t) * (size_t)(plan.segments + 1),
                            m->stream));
  NN_TRY(nn_cuda_copy_async(m->seg_row, m->h_seg_row,
                            sizeof(int32_t) * (size_t)plan.segments,
                            m->stream));
  NN_TRY(nn_cuda_event_record(m->uploaded, m->stream));
  return 0;
}

extern "C" int gpt2_cuda_backward(gpt2_cuda_model *m, const gpt2_cuda_ops *ops,
                                  gpt2_timers *t) {
  const gpt2_dims *d = &m->d;
  const gpt2_sizes s = gpt2_sizes_of(d);
  const int64_t C = s.C, N = s.N, Nl = s.Nl, E = s.E, F = s.F, L = s.L;
  float **P = m->P, **G = m->G;
  void *st = m->stream;
  double start = now(), paused = 0;
  const int lnf = gpt2_lnf_param(&d->c);
  float *scr = m->colsum_scratch;

  // head (tied to wte): logits = lnf wte^T; m->logits holds dlogits.
  // dX [N, C] = dlogits wte, dW [vl, C] = dlogits^T lnf (overwritten)
  const float *lnf_in = d->sp ? m->lnfg : m->lnf;
  NN_TRY(nn_cuda_sgemm(m->blas, 0, 0, (int)C, (int)N, d->vl, 1.0f, P[GPT2_WTE],
                       (int)C, m->logits, (int)m->ldv, 0.0f, m->dtmp, (int)C));
  NN_TRY(nn_cuda_sgemm(m->blas, 0, 1, (int)C, d->vl, (int)N, 1.0f, lnf_in,
                       (int)C, m->logits, (int)m->ldv, 0.0f, G[GPT2_WTE],
                       (int)C));
  const float *dln = NULL;
  CALL(t, 1, reduce_out(m, ops, m->dtmp, m->tmp2, &dln));
  NN_TRY(nn_cuda_zero_async(m->dresid, sizeof(float) * (size_t)(Nl * C), st));
  const float *xL = m->resid + L * Nl * C;
  NN_TRY(nn_cuda_layernorm_bwd(xL, P[lnf], m->lnf_stats, m->lnf_stats + Nl, dln,
                               m->dresid, G[lnf], G[lnf + 1], (int)Nl, (int)C,
                               scr, st));
  READY_REPLICATED(lnf);
  READY_REPLICATED(lnf + 1);

  for (int l = (int)L - 1; l >= 0; l--) {
    const int64_t o_l = (int64_t)l * Nl * C, o_g = (int64_t)l * N * C;
    const float *x = m->resid + o_l, *r2 = m->resid2 + o_l;
    const float *st1 = m->ln1_stats + 2 * (int64_t)l * Nl;
    const float *st2 = m->ln2_stats + 2 * (int64_t)l * Nl;
    const float *qkv = m->qkv + (int64_t)l * N * 3 * E;
    const float *att = m->att + (int64_t)l * s.B * s.hl * s.T * s.T;
    const float *atty = m->atty + (int64_t)l * N * E;
    const float *fch = m->fch + (int64_t)l * N * F;
    const float *fcg = m->fcg + (int64_t)l * N * F;
    const float *ln1_in = d->sp ? m->ln1g + o_g : m->ln1 + o_l;
    const float *ln2_in = d->sp ? m->ln2g + o_g : m->ln2 + o_l;
    const float *dy = NULL, *dred = NULL;

    // MLP: x_out = r2 + sum_tp(fcg Wmo) + bmo
    int i_mo_b = gpt2_block_param(l, GPT2_MO_B);
    NN_TRY(nn_cuda_colsum(m->dresid, G[i_mo_b], (int)Nl, (int)C, scr, st));
    READY_REPLICATED(i_mo_b);
    CALL(t, 1, gather_in(m, ops, m->dresid, m->dfull, &dy));
    int i_mo_w = gpt2_block_param(l, GPT2_MO_W);
    NN_TRY(conv1d_bwd(m, fcg, P[i_mo_w], dy, m->dfc, G[i_mo_w], NULL, N, F, C));
    READY(i_mo_w);
    NN_TRY(nn_cuda_gelu_bwd(fch, m->dfc, N * F, st));
    int i_fc_w = gpt2_block_param(l, GPT2_FC_W);
    NN_TRY(conv1d_bwd(m, ln2_in, P[i_fc_w], m->dfc, m->dtmp, G[i_fc_w],
                      G[i_fc_w + 1], N, C, F));
    READY(i_fc_w);
    READY(i_fc_w + 1);
    CALL(t, 1, reduce_out(m, ops, m->dtmp, m->tmp2, &dred));
    int i_ln2 = gpt2_block_param(l, GPT2_LN2_W);
    NN_TRY(nn_cuda_layernorm_bwd(r2, P[i_ln2], st2, st2 + Nl, dred, m->dresid,
                                 G[i_ln2], G[i_ln2 + 1], (int)Nl, (int)C, scr,
                                 st));
    READY_REPLICATED(i_ln2);
    READY_REPLICATED(i_ln2 + 1);

    // attention: r2 = x + sum_tp(atty Wao) + bao
    int i_ao_b = gpt2_block_param(l, GPT2_AO_B);
    NN_TRY(nn_cuda_colsum(m->dresid, G[i_ao_b], (int)Nl, (int)C, scr, st));
    READY_REPLICATED(i_ao_b);
    CALL(t, 1, gather_in(m, ops, m->dresid, m->dfull, &dy));
    int i_ao_w = gpt2_block_param(l, GPT2_AO_W);
    NN_TRY(
        conv1d_bwd(m, atty, P[i_ao_w], dy, m->datty, G[i_ao_w], NULL, N, E, C));
    READY(i_ao_w);
    NN_TRY(attention_bwd(m, qkv, att, m->datty, m->dqkv));
    int i_qkv = gpt2_block_param(l, GPT2_QKV_W);
    NN_TRY(conv1d_bwd(m, ln1_in, P[i_qkv], m->dqkv, m->dtmp, G[i_qkv],
                      G[i_qkv + 1], N, C, 3 * E));
    READY(i_qkv);
    READY(i_qkv + 1);
    CALL(t, 1, reduce_out(m, ops, m->dtmp, m->tmp2, &dred));
    int i_ln1 = gpt2_block_param(l, GPT2_LN1_W);
    NN_TRY(nn_cuda_layernorm_bwd(x, P[i_ln1], st1, st1 + Nl, dred, m->dresid,
                                 G[i_ln1], G[i_ln1 + 1], (int)Nl, (int)C, scr,
                                 st));
    READY_REPLICATED(i_ln1);
    READY_REPLICATED(i_ln1 + 1);
  }

  // embeddings: the full rows' gradient (gathered under sp)
  const float *dx0 = NULL;
  CALL(t, 1, gather_in(m, ops, m->dresid, m->dfull, &dx0));
  NN_TRY(nn_cuda_zero_async(
      G[GPT2_WPE], sizeof(float) * (size_t)d->c.n_positions * (size_t)C, st));
  NN_TRY(nn_cuda_position_bwd(dx0, d->B, d->T, (int)C, G[GPT2_WPE], st));
  READY(GPT2_WPE);
  int segments = 0;
  NN_TRY(upload_plan(m, &segments));
  NN_TRY(nn_cuda_embedding_bwd(m->order, m->seg_start, m->seg_row, segments,
                               dx0, (int)C, G[GPT2_WTE], st));
  READY(GPT2_WTE);
  t->compute += now() - start - paused;
  return 0;
}
