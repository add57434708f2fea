// SPDX-License-Identifier: BSD-3-Clause
/* examples/common/nn_cpu.h: kernels for the example models. */
#include "examples/common/nn_cpu.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

/* A small pool for the elementwise kernels. Its workers wait on a
 * condition variable, not spinning: between kernels the cores belong to
 * OpenBLAS (an OpenMP runtime's spin-waiting took a tenth of a step from
 * it). */
#define NN_MAX_THREADS 64
typedef void (*range_fn)(int64_t lo, int64_t hi, void *ctx);
static struct {
  int n; /* threads taking part, the caller's included */
  int started;
  pthread_t workers[NN_MAX_THREADS];
  /* generation when worker i was created: the jobs after it are its own,
   * even those posted before the new thread first takes the lock. */
  uint64_t born[NN_MAX_THREADS];
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  uint64_t generation;
  int pending;
  range_fn fn;
  void *ctx;
  int64_t total;
} pool = {1,
          0,
          {0},
          {0},
          PTHREAD_MUTEX_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          0,
          0,
          NULL,
          NULL,
          0};

static void *pool_worker(void *arg) {
  const int64_t me = (int64_t)(intptr_t)arg; /* 1 .. n-1 */
  pthread_mutex_lock(&pool.mu);
  /* Not pool.generation here: a job posted between pthread_create and
   * this line would be skipped, and its caller would wait for it forever. */
  uint64_t seen = pool.born[me];
  for (;;) {
    while (pool.generation == seen) pthread_cond_wait(&pool.go, &pool.mu);
    seen = pool.generation;
    const int64_t k = pool.n;
    if (me >= k) continue; /* fewer threads asked for: sit this one out */
    range_fn fn = pool.fn;
    void *ctx = pool.ctx;
    const int64_t n = pool.total;
    pthread_mutex_unlock(&pool.mu);
    fn(n * me / k, n * (me + 1) / k, ctx);
    pthread_mutex_lock(&pool.mu);
    if (--pool.pending == 0) pthread_cond_signal(&pool.done);
  }
  return NULL;
}

void nn_set_threads(int n) {
  n = n < 1 ? 1 : n > NN_MAX_THREADS ? NN_MAX_THREADS : n;
  openblas_set_num_threads(n);
  pthread_mutex_lock(&pool.mu);
  /* Workers are started once (more on a later, larger request); a smaller
   * request just uses fewer of them. */
  for (int i = pool.started + 1; i < n; i++) {
    pool.born[i] = pool.generation;
    if (pthread_create(&pool.workers[i], NULL, pool_worker,
                       (void *)(intptr_t)i) != 0)
      break;
    pthread_detach(pool.workers[i]);
    pool.started = i;
  }
  pool.n = pool.started + 1 < n ? pool.started + 1 : n;
  pthread_mutex_unlock(&pool.mu);
}

int nn_threads(void) { return pool.n; }

/* Run fn over [0, n) in one contiguous range per thread (a single call for
 * short loops, where waking threads would cost more than it saves).
 * Called from one thread at a time. */
static void parallel_ranges(int64_t n, range_fn fn, void *ctx) {
  const int k = pool.n;
  if (k <= 1 || n < 65536) {
    fn(0, n, ctx);
    return;
  }
  pthread_mutex_lock(&pool.mu);
  pool.fn = fn;
  pool.ctx = ctx;
  pool.total = n;
  pool.pending = k - 1;
  pool.generation++;
  pthread_cond_broadcast(&pool.go);
  pthread_mutex_unlock(&pool.mu);
  fn(0, n / k, ctx);
  pthread_mutex_lock(&pool.mu);
  while (pool.pending > 0) pthread_cond_wait(&pool.done, &pool.mu);
  pthread_mutex_unlock(&pool.mu);
}

void nn_conv1d_fwd(const float *X, const float *W, const float *b, float *Y,
                   int N, int in, int out) {
  if ((int64_t)N * out == 0) return;
  if (in == 0)
    memset(Y, 0, sizeof(float) * (size_t)N * (size_t)out);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, out, in, 1.0f, X,
                in, W, out, 0.0f, Y, out);
  if (b == NULL) return;
  for (int i = 0; i < N; i++) {
    float *y = Y + (int64_t)i * out;
    for (int j = 0; j < out; j++) y[j] += b[j];
  }
}

void nn_conv1d_bwd(const float *X, const float *W, const float *dY, float *dX,
                   float *dW, float *db, int N, int in, int out, float beta,
                   float grad_beta) {
  if (dX && (int64_t)N * in > 0) {
    if (out == 0) {
      if (beta == 0.0f) memset(dX, 0, sizeof(float) * (size_t)N * (size_t)in);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, in, out, 1.0f, dY,
                  out, W, out, beta, dX, in);
    }
  }
  if (dW && (int64_t)in * out > 0) {
    if (N == 0) {
      if (grad_beta == 0.0f)
        memset(dW, 0, sizeof(float) * (size_t)in * (size_t)out);
    } else {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, N, 1.0f, X,
                  in, dY, out, grad_beta, dW, out);
    }
  }
  if (db) {
    if (grad_beta == 0.0f) memset(db, 0, sizeof(float) * (size_t)out);
    for (int i = 0; i < N; i++) {
      const float *dy = dY + (int64_t)i * out;
      for (int j = 0; j < out; j++) db[j] += dy[j];
    }
  }
}

void nn_linear_fwd(const float *X, const float *W, float *Y, int N, int in,
                   int out) {
  if ((int64_t)N * out == 0) return;
  if (in == 0) {
    memset(Y, 0, sizeof(float) * (size_t)N * (size_t)out);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1.0f, X, in,
              W, in, 0.0f, Y, out);
}

void nn_linear_bwd(const float *X, const float *W, const float *dY, float *dX,
                   float *dW, int N, int in, int out, float grad_beta) {
  if (dX && (int64_t)N * in > 0) {
    if (out == 0)
      memset(dX, 0, sizeof(float) * (size_t)N * (size_t)in);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1.0f,
                  dY, out, W, in, 0.0f, dX, in);
  }
  if (dW && (int64_t)out * in > 0) {
    if (N == 0) {
      if (grad_beta == 0.0f)
        memset(dW, 0, sizeof(float) * (size_t)out * (size_t)in);
    } else {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N, 1.0f, dY,
                  out, X, in, grad_beta, dW, in);
    }
  }
}

void nn_layernorm_fwd(const float *X, const float *g, const float *b, float *Y,
                      float *mean, float *rstd, int N, int C, float eps) {
  for (int i = 0; i < N; i++) {
    const float *x = X + (int64_t)i * C;
    float *y = Y + (int64_t)i * C;
    double s = 0, ss = 0;
    for (int k = 0; k < C; k++) s += x[k];
    const float mu = (float)(s / C);
    for (int k = 0; k < C; k++) {
      float d = x[k] - mu;
      ss += (double)d * d;
    }
    const float r = (float)(1.0 / sqrt(ss / C + eps));
    mean[i] = mu;
    rstd[i] = r;
    for (int k = 0; k < C; k++) y[k] = (x[k] - mu) * r * g[k] + b[k];
  }
}

void nn_layernorm_bwd(const float *X, const float *g, const float *mean,
                      const float *rstd, const float *dY, float *dX, float *dg,
                      float *db, int N, int C, float grad_beta) {
  if (grad_beta == 0.0f) {
    memset(dg, 0, sizeof(float) * (size_t)C);
    memset(db, 0, sizeof(float) * (size_t)C);
  }
  for (int i = 0; i < N; i++) {
    const float *x = X + (int64_t)i * C, *dy = dY + (int64_t)i * C;
    float *dx = dX + (int64_t)i * C;
    const float mu = mean[i], r = rstd[i];
    double s1 = 0, s2 = 0;
    for (int k = 0; k < C; k++) {
      float xhat = (x[k] - mu) * r;
      float dxhat = dy[k] * g[k];
      dg[k] += dy[k] * xhat;
      db[k] += dy[k];
      s1 += dxhat;
      s2 += (double)dxhat * xhat;
    }
    const float m1 = (float)(s1 / C), m2 = (float)(s2 / C);
    for (int k = 0; k < C; k++) {
      float xhat = (x[k] - mu) * r;
      dx[k] += r * (dy[k] * g[k] - m1 - xhat * m2);
    }
  }
}

static const float GELU_K = 0.7978845608028654f; /* sqrt(2/pi) */
static const float GELU_C = 0.044715f;

typedef struct {
  const float *x;
  float *y;
} gelu_ctx;

static void gelu_fwd_range(int64_t lo, int64_t hi, void *vctx) {
  const gelu_ctx *c = vctx;
  const float *x = c->x;
  float *y = c->y;
  for (int64_t k = lo; k < hi; k++) {
    float v = x[k];
    float t = nn_tanhf(GELU_K * (v + GELU_C * v * v * v));
    y[k] = 0.5f * v * (1.0f + t);
  }
}

void nn_gelu_fwd(const float *x, float *y, int64_t n) {
  gelu_ctx c = {x, y};
  parallel_ranges(n, gelu_fwd_range, &c);
}

static void gelu_bwd_range(int64_t lo, int64_t hi, void *vctx) {
  const gelu_ctx *c = vctx;
  const float *x = c->x;
  float *d = c->y;
  for (int64_t k = lo; k < hi; k++) {
    float v = x[k];
    float t = nn_tanhf(GELU_K * (v + GELU_C * v * v * v));
    float dt = (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
    d[k] *= 0.5f * (1.0f + t) + 0.5f * v * dt;
  }
}

void nn_gelu_bwd(const float *x, float *d, int64_t n) {
  gelu_ctx c = {x, d};
  parallel_ranges(n, gelu_bwd_range, &c);
}

typedef struct {
  float *p, *m, *v;
  const float *g;
  nn_adamw_scalars s;
} adamw_ctx;

static void adamw_range(int64_t lo, int64_t hi, void *vctx) {
  const adamw_ctx *c = vctx;
  float *restrict p = c->p, *restrict m = c->m, *restrict v = c->v;
  const float *restrict g = c->g;
  const nn_adamw_scalars s = c->s;
  for (int64_t k = lo; k < hi; k++)
    nn_adamw_element(&p[k], &m[k], &v[k], g[k], &s);
}

void nn_adamw(float *p, const float *g, float *m, float *v, int64_t n,
              const nn_adamw_opts *o, double weight_decay, int step) {
  adamw_ctx c = {p, m, v, g, nn_adamw_scalars_make(o, weight_decay, step)};
  parallel_ranges(n, adamw_range, &c);
}
