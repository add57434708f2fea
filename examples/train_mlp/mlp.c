// SPDX-License-Identifier: BSD-3-Clause
/* The residual MLP of examples/train_mlp: kernels, forward and backward for
 * one TP rank, AdamW, deterministic init and synthetic data. */
#include "examples/train_mlp/mlp.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double mlp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------ layout */

int mlp_num_params(const mlp_shape *s) { return 4 + BLK_SLOTS * s->layers; }
int mlp_block_param(int layer, int slot) {
  return 2 + BLK_SLOTS * layer + slot;
}
int mlp_head_param(const mlp_shape *s) { return 2 + BLK_SLOTS * s->layers; }

static void shape_of(const mlp_shape *s, int f, int i, int *ndim,
                     int64_t shape[2]) {
  int head = mlp_head_param(s);
  int H = s->hidden;
  if (i == MLP_IN_W) {
    *ndim = 2;
    shape[0] = H;
    shape[1] = s->d_in;
    return;
  }
  if (i == MLP_IN_B) {
    *ndim = 1;
    shape[0] = H;
    return;
  }
  if (i == head) {
    *ndim = 2;
    shape[0] = s->classes;
    shape[1] = H;
    return;
  }
  if (i == head + 1) {
    *ndim = 1;
    shape[0] = s->classes;
    return;
  }
  switch ((i - 2) % BLK_SLOTS) {
    case BLK_FC1_W:
      *ndim = 2;
      shape[0] = f;
      shape[1] = H;
      return;
    case BLK_FC1_B:
      *ndim = 1;
      shape[0] = f;
      return;
    case BLK_FC2_W:
      *ndim = 2;
      shape[0] = H;
      shape[1] = f;
      return;
    default:
      *ndim = 1;
      shape[0] = H;
      return; /* norm w/b, fc2 bias */
  }
}

void mlp_local_shape(const mlp_shape *s, int f_local, int i, int *ndim,
                     int64_t shape[2]) {
  shape_of(s, f_local, i, ndim, shape);
}

void mlp_param_info(const mlp_shape *s, int i, char *name, int len, int *ndim,
                    int64_t shape[2]) {
  static const char *const slot_names[BLK_SLOTS] = {"norm.weight", "norm.bias",
                                                    "fc1.weight",  "fc1.bias",
                                                    "fc2.weight",  "fc2.bias"};
  int head = mlp_head_param(s);
  if (i == MLP_IN_W)
    snprintf(name, (size_t)len, "inp.weight");
  else if (i == MLP_IN_B)
    snprintf(name, (size_t)len, "inp.bias");
  else if (i == head)
    snprintf(name, (size_t)len, "head.weight");
  else if (i == head + 1)
    snprintf(name, (size_t)len, "head.bias");
  else
    snprintf(name, (size_t)len, "layers.%d.%s", (i - 2) / BLK_SLOTS,
             slot_names[(i - 2) % BLK_SLOTS]);
  shape_of(s, s->ffn, i, ndim, shape);
}

/* ------------------------------------------------------------ random */

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform01(uint64_t *state) {
  return (double)(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

static double normal(uint64_t *state) {
  double u1 = uniform01(state), u2 = uniform01(state);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void mlp_init_param(const mlp_shape *s, int i, uint64_t seed, float *out) {
  int ndim;
  int64_t shape[2];
  char name[64];
  mlp_param_info(s, i, name, sizeof name, &ndim, shape);
  int64_t n = ndim == 2 ? shape[0] * shape[1] : shape[0];
  uint64_t st = seed * 1000003ull + (uint64_t)i * 7919ull + 1;
  int is_norm =
      i >= 2 && i < mlp_head_param(s) &&
      ((i - 2) % BLK_SLOTS == BLK_LN_G || (i - 2) % BLK_SLOTS == BLK_LN_B);
  if (is_norm) {
    float v = (i - 2) % BLK_SLOTS == BLK_LN_G ? 1.0f : 0.0f;
    for (int64_t k = 0; k < n; k++) out[k] = v;
    return;
  }
  /* As torch.nn.Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both. */
  int fan_in;
  if (i == MLP_IN_W || i == MLP_IN_B)
    fan_in = s->d_in;
  else if (i >= mlp_head_param(s))
    fan_in = s->hidden;
  else if ((i - 2) % BLK_SLOTS == BLK_FC2_W || (i - 2) % BLK_SLOTS == BLK_FC2_B)
    fan_in = s->ffn;
  else
    fan_in = s->hidden;
  double bound = 1.0 / sqrt((double)fan_in);
  for (int64_t k = 0; k < n; k++)
    out[k] = (float)((2.0 * uniform01(&st) - 1.0) * bound);
}

void mlp_make_batch(const mlp_shape *s, uint64_t seed, int step, int batch,
                    float *x, int *labels) {
  enum { TEACHER_HIDDEN = 32 };
  int D = s->d_in, C = s->classes;
  uint64_t st = seed * 0x51ed27ull + (uint64_t)step * 104729ull + 17;
  for (int64_t k = 0; k < (int64_t)batch * D; k++) x[k] = (float)normal(&st);
  /* The teacher depends on the seed only, not the step. */
  uint64_t tst = seed * 0x7a3ull + 99;
  double *A = malloc(sizeof(double) * TEACHER_HIDDEN * (size_t)D);
  double *Bm = malloc(sizeof(double) * (size_t)C * TEACHER_HIDDEN);
  if (A == NULL || Bm == NULL) {
    free(A);
    free(Bm);
    for (int b = 0; b < batch; b++) labels[b] = 0;
    return;
  }
  for (int k = 0; k < TEACHER_HIDDEN * D; k++) A[k] = normal(&tst) / sqrt(D);
  for (int k = 0; k < C * TEACHER_HIDDEN; k++) Bm[k] = normal(&tst);
  for (int b = 0; b < batch; b++) {
    double hid[TEACHER_HIDDEN];
    for (int j = 0; j < TEACHER_HIDDEN; j++) {
      double acc = 0;
      for (int d = 0; d < D; d++) acc += A[j * D + d] * x[(int64_t)b * D + d];
      hid[j] = tanh(acc);
    }
    int best = 0;
    double best_v = -1e300;
    for (int c = 0; c < C; c++) {
      double acc = 0;
      for (int j = 0; j < TEACHER_HIDDEN; j++)
        acc += Bm[c * TEACHER_HIDDEN + j] * hid[j];
      if (acc > best_v) {
        best_v = acc;
        best = c;
      }
    }
    labels[b] = best;
  }
  free(A);
  free(Bm);
}

/* ------------------------------------------------------------ kernels */

/* Y[B,NO] = X[B,NI] W[NO,NI]^T + bias[NO] (bias may be NULL). */
static void linear_fwd(const float *X, const float *W, const float *bias,
                       float *Y, int B, int NI, int NO) {
  if (NO == 0 || B == 0) return;
  if (NI == 0) {
    memset(Y, 0, sizeof(float) * (size_t)B * (size_t)NO);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, NO, NI, 1.0f, X, NI,
                W, NI, 0.0f, Y, NO);
  }
  if (bias)
    for (int b = 0; b < B; b++)
      for (int o = 0; o < NO; o++) Y[(int64_t)b * NO + o] += bias[o];
}

/* dW[NO,NI] = dY^T X, dbias[NO] = sum_b dY (either may be NULL). */
/* dW = dY^T X, dbias = column sums of dY: overwritten, or added to when
 * `add` (gradient accumulation). */
static void linear_bwd_params(const float *X, const float *dY, float *dW,
                              float *dbias, int B, int NI, int NO, int add) {
  if (dW && (int64_t)NO * NI > 0) {
    if (B == 0) {
      if (!add) memset(dW, 0, sizeof(float) * (size_t)NO * (size_t)NI);
    } else {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, NO, NI, B, 1.0f, dY,
                  NO, X, NI, add ? 1.0f : 0.0f, dW, NI);
    }
  }
  if (dbias) {
    for (int o = 0; o < NO && !add; o++) dbias[o] = 0;
    for (int b = 0; b < B; b++)
      for (int o = 0; o < NO; o++) dbias[o] += dY[(int64_t)b * NO + o];
  }
}

/* dX[B,NI] = dY[B,NO] W[NO,NI] (beta 0 overwrites, 1 adds). */
static void linear_bwd_input(const float *dY, const float *W, float *dX, int B,
                             int NI, int NO, float beta) {
  if ((int64_t)B * NI == 0) return;
  if (NO == 0) {
    if (beta == 0.0f) memset(dX, 0, sizeof(float) * (size_t)B * (size_t)NI);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, NI, NO, 1.0f, dY,
              NO, W, NI, beta, dX, NI);
}

static const float LN_EPS = 1e-5f;

static void layernorm_fwd(const float *X, const float *g, const float *bta,
                          float *Y, float *mean, float *rstd, int B, int H) {
  for (int b = 0; b < B; b++) {
    const float *x = X + (int64_t)b * H;
    double mu = 0, var = 0;
    for (int k = 0; k < H; k++) mu += x[k];
    mu /= H;
    for (int k = 0; k < H; k++) var += (x[k] - mu) * (x[k] - mu);
    var /= H;
    float r = (float)(1.0 / sqrt(var + LN_EPS));
    mean[b] = (float)mu;
    rstd[b] = r;
    for (int k = 0; k < H; k++)
      Y[(int64_t)b * H + k] = (x[k] - (float)mu) * r * g[k] + bta[k];
  }
}

/* dX (added into) from dY; dg, db overwritten. */
static void layernorm_bwd(const float *X, const float *g, const float *mean,
                          const float *rstd, const float *dY, float *dX,
                          float *dg, float *db, int B, int H, int add) {
  for (int k = 0; k < H && !add; k++) dg[k] = db[k] = 0;
  for (int b = 0; b < B; b++) {
    const float *x = X + (int64_t)b * H, *dy = dY + (int64_t)b * H;
    float mu = mean[b], r = rstd[b];
    double sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int k = 0; k < H; k++) {
      float xhat = (x[k] - mu) * r;
      float dxhat = dy[k] * g[k];
      dg[k] += dy[k] * xhat;
      db[k] += dy[k];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
    }
    float m1 = (float)(sum_dxhat / H), m2 = (float)(sum_dxhat_xhat / H);
    for (int k = 0; k < H; k++) {
      float xhat = (x[k] - mu) * r;
      dX[(int64_t)b * H + k] += r * (dy[k] * g[k] - m1 - xhat * m2);
    }
  }
}

static const float GELU_K = 0.7978845608028654f; /* sqrt(2/pi) */

static void gelu_fwd(const float *a, float *g, int64_t n) {
  for (int64_t k = 0; k < n; k++) {
    float x = a[k];
    g[k] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
  }
}

/* da = dg * GELU'(a), in place over dg. */
static void gelu_bwd(const float *a, float *dg, int64_t n) {
  for (int64_t k = 0; k < n; k++) {
    float x = a[k];
    float t = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    float d = 0.5f * (1.0f + t) +
              0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 0.134145f * x * x);
    dg[k] *= d;
  }
}

/* Softmax cross-entropy: returns the loss sum; dlogits = (p - onehot)/scale. */
static double softmax_ce(float *logits, const int *labels, int B, int C,
                         float scale) {
  double total = 0;
  for (int b = 0; b < B; b++) {
    float *z = logits + (int64_t)b * C;
    float mx = z[0];
    for (int c = 1; c < C; c++) mx = z[c] > mx ? z[c] : mx;
    double sum = 0;
    for (int c = 0; c < C; c++) sum += exp((double)(z[c] - mx));
    double lse = log(sum) + mx;
    total += lse - z[labels[b]];
    for (int c = 0; c < C; c++) {
      double p = exp((double)z[c] - lse);
      z[c] = (float)((p - (c == labels[b] ? 1.0 : 0.0)) / scale);
    }
  }
  return total;
}

/* ------------------------------------------------------------ model */

int mlp_model_init(mlp_model *m, const mlp_shape *s, int f_local, int batch,
                   float **param, float **grad) {
  memset(m, 0, sizeof *m);
  m->s = *s;
  m->f_local = f_local;
  m->param = param;
  m->grad = grad;
  m->batch = batch;
  size_t B = (size_t)batch, H = (size_t)s->hidden, L = (size_t)s->layers;
  size_t F = (size_t)f_local, C = (size_t)s->classes;
  /* +1 keeps calloc from returning NULL for empty shards. */
  m->x = calloc(B * (size_t)s->d_in + 1, sizeof(float));
  m->h = calloc((L + 1) * B * H + 1, sizeof(float));
  m->y = calloc(L * B * H + 1, sizeof(float));
  m->mean = calloc(L * B + 1, sizeof(float));
  m->rstd = calloc(L * B + 1, sizeof(float));
  m->a = calloc(L * B * F + 1, sizeof(float));
  m->g = calloc(L * B * F + 1, sizeof(float));
  m->tmp = calloc(B * H + 1, sizeof(float));
  m->logits = calloc(B * C + 1, sizeof(float));
  m->dh = calloc(B * H + 1, sizeof(float));
  m->dy = calloc(B * H + 1, sizeof(float));
  m->da = calloc(B * F + 1, sizeof(float));
  if (!m->x || !m->h || !m->y || !m->mean || !m->rstd || !m->a || !m->g ||
      !m->tmp || !m->logits || !m->dh || !m->dy || !m->da) {
    mlp_model_free(m);
    return -1;
  }
  return 0;
}

void mlp_model_free(mlp_model *m) {
  float *bufs[] = {m->x, m->h,   m->y,      m->mean, m->rstd, m->a,
                   m->g, m->tmp, m->logits, m->dh,   m->dy,   m->da};
  for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) free(bufs[k]);
  memset(m, 0, sizeof *m);
}

#define TP_ALLREDUCE(kind, layer, buf, n)                                     \
  do {                                                                        \
    double t0_ = mlp_now();                                                   \
    int rc_ = allreduce ? allreduce((kind), (layer), (buf), (n), ar_ctx) : 0; \
    t->tp_comm += mlp_now() - t0_;                                            \
    paused += mlp_now() - t0_;                                                \
    if (rc_ != 0) return rc_;                                                 \
  } while (0)

#define GRAD_READY(i)                       \
  do {                                      \
    if (on_grad_ready) {                    \
      double t0_ = mlp_now();               \
      int rc_ = on_grad_ready((i), gr_ctx); \
      paused += mlp_now() - t0_;            \
      if (rc_ != 0) return rc_;             \
    }                                       \
  } while (0)

/* The block callback, its time not counted as compute. */
#define BLOCK_EVENT(event, layer)                            \
  do {                                                       \
    if (m->block_fn) {                                       \
      double t0_ = mlp_now();                                \
      int rc_ = m->block_fn((event), (layer), m->block_ctx); \
      paused += mlp_now() - t0_;                             \
      if (rc_ != 0) return rc_;                              \
    }                                                        \
  } while (0)

int mlp_forward(mlp_model *m, const float *x, const int *labels,
                float loss_scale, mlp_allreduce_fn allreduce, void *ar_ctx,
                double *loss_sum, mlp_timers *t) {
  const mlp_shape *s = &m->s;
  int B = m->batch, H = s->hidden, D = s->d_in, C = s->classes;
  int F = m->f_local, L = s->layers, head = mlp_head_param(s);
  float **P = m->param;
  double start = mlp_now(), paused = 0;
  int64_t BH = (int64_t)B * H, BF = (int64_t)B * F;
  memcpy(m->x, x, sizeof(float) * (size_t)B * (size_t)D);
  m->labels = labels;
  m->loss_scale = loss_scale;
  linear_fwd(m->x, P[MLP_IN_W], P[MLP_IN_B], m->h, B, D, H);
  for (int l = 0; l < L; l++) {
    const float *hin = m->h + l * BH;
    float *hout = m->h + (l + 1) * BH;
    float *y = m->y + l * BH, *a = m->a + l * BF, *g = m->g + l * BF;
    BLOCK_EVENT(MLP_BLOCK_FORWARD_BEGIN, l);
    layernorm_fwd(hin, P[mlp_block_param(l, BLK_LN_G)],
                  P[mlp_block_param(l, BLK_LN_B)], y, m->mean + l * B,
                  m->rstd + l * B, B, H);
    linear_fwd(y, P[mlp_block_param(l, BLK_FC1_W)],
               P[mlp_block_param(l, BLK_FC1_B)], a, B, H, F);
    gelu_fwd(a, g, BF);
    /* rowwise: partial sums over this rank's slice of F, then allreduce */
    linear_fwd(g, P[mlp_block_param(l, BLK_FC2_W)], NULL, m->tmp, B, F, H);
    if (F == 0) memset(m->tmp, 0, sizeof(float) * (size_t)BH);
    TP_ALLREDUCE(MLP_TP_ROWWISE_OUT, l, m->tmp, BH);
    const float *b2 = P[mlp_block_param(l, BLK_FC2_B)];
    for (int b = 0; b < B; b++)
      for (int k = 0; k < H; k++)
        hout[(int64_t)b * H + k] =
            hin[(int64_t)b * H + k] + m->tmp[(int64_t)b * H + k] + b2[k];
    BLOCK_EVENT(MLP_BLOCK_FORWARD_END, l);
  }
  linear_fwd(m->h + L * BH, P[head], P[head + 1], m->logits, B, H, C);
  *loss_sum = softmax_ce(m->logits, labels, B, C, loss_scale);
  t->compute += mlp_now() - start - paused;
  return 0;
}

int mlp_backward(mlp_model *m, mlp_allreduce_fn allreduce, void *ar_ctx,
                 mlp_grad_ready_fn on_grad_ready, void *gr_ctx, mlp_timers *t) {
  const mlp_shape *s = &m->s;
  int B = m->batch, H = s->hidden, D = s->d_in, C = s->classes;
  int F = m->f_local, L = s->layers, head = mlp_head_param(s);
  float **P = m->param, **G = m->grad;
  double start = mlp_now(), paused = 0;
  int64_t BH = (int64_t)B * H, BF = (int64_t)B * F;
  const float *hL = m->h + L * BH;
  /* m->logits holds dlogits since the forward */
  const int add = m->accumulate;
  linear_bwd_params(hL, m->logits, G[head], G[head + 1], B, H, C, add);
  GRAD_READY(head);
  GRAD_READY(head + 1);
  linear_bwd_input(m->logits, P[head], m->dh, B, H, C, 0.0f);
  for (int l = L - 1; l >= 0; l--) {
    const float *hin = m->h + l * BH;
    float *y = m->y + l * BH, *a = m->a + l * BF, *g = m->g + l * BF;
    BLOCK_EVENT(MLP_BLOCK_BACKWARD_BEGIN, l);
    /* z = allreduce(g W2^T) + b2; dz = dh (residual), replicated */
    linear_bwd_params(g, m->dh, G[mlp_block_param(l, BLK_FC2_W)],
                      G[mlp_block_param(l, BLK_FC2_B)], B, F, H, add);
    GRAD_READY(mlp_block_param(l, BLK_FC2_W));
    GRAD_READY(mlp_block_param(l, BLK_FC2_B));
    linear_bwd_input(m->dh, P[mlp_block_param(l, BLK_FC2_W)], m->da, B, F, H,
                     0.0f);
    gelu_bwd(a, m->da, BF);
    linear_bwd_params(y, m->da, G[mlp_block_param(l, BLK_FC1_W)],
                      G[mlp_block_param(l, BLK_FC1_B)], B, H, F, add);
    GRAD_READY(mlp_block_param(l, BLK_FC1_W));
    GRAD_READY(mlp_block_param(l, BLK_FC1_B));
    /* colwise input backward: dy is partial over TP ranks */
    linear_bwd_input(m->da, P[mlp_block_param(l, BLK_FC1_W)], m->dy, B, H, F,
                     0.0f);
    TP_ALLREDUCE(MLP_TP_COLWISE_IN_GRAD, l, m->dy, BH);
    /* dh accumulates the branch through the norm (residual keeps dh) */
    layernorm_bwd(hin, P[mlp_block_param(l, BLK_LN_G)], m->mean + l * B,
                  m->rstd + l * B, m->dy, m->dh,
                  G[mlp_block_param(l, BLK_LN_G)],
                  G[mlp_block_param(l, BLK_LN_B)], B, H, add);
    GRAD_READY(mlp_block_param(l, BLK_LN_G));
    GRAD_READY(mlp_block_param(l, BLK_LN_B));
    BLOCK_EVENT(MLP_BLOCK_BACKWARD_END, l);
  }
  linear_bwd_params(m->x, m->dh, G[MLP_IN_W], G[MLP_IN_B], B, D, H, add);
  GRAD_READY(MLP_IN_W);
  GRAD_READY(MLP_IN_B);
  t->compute += mlp_now() - start - paused;
  return 0;
}
