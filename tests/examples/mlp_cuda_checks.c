// SPDX-License-Identifier: BSD-3-Clause
/* The CUDA model (examples/train_mlp/mlp_cuda.cu) against the CPU model
 * (mlp.c) on the same parameters and batch: loss, every parameter
 * gradient, and AdamW (nn_cuda_adamw against nn_cpu's nn_adamw, the
 * optimizer train_mlp runs on either). Tolerance: 1e-4 relative to each
 * gradient tensor's largest magnitude (the two differ only in summation
 * order and libm), 1e-5 relative on the loss; AdamW bitwise equal. */
#include "tests/examples/mlp_cuda_checks.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/common/nn_cpu.h"
#include "examples/train_mlp/mlp.h"
#include "examples/train_mlp/mlp_cuda.h"

static int failf(char *msg, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, len, fmt, ap);
  va_end(ap);
  return 1;
}

int mlp_cuda_gpu_present(char *msg, size_t len) {
  int n = 0;
  if (nn_cuda_device_count(&n) != 0) {
    snprintf(msg, len, "%s", nn_cuda_last_error());
    return 0;
  }
  if (n < 1) {
    snprintf(msg, len, "cudaGetDeviceCount found 0 devices");
    return 0;
  }
  return 1;
}

/* Parameters of one rank holding the first f_local rows of fc1 / columns
 * of fc2 (host copies plus device copies). */
typedef struct {
  int np;
  int64_t *numel;
  float **host, **host_grad; /* CPU model */
  float **dev, **dev_grad;   /* GPU model */
} params;

static void params_free(params *p) {
  for (int i = 0; i < p->np; i++) {
    if (p->host) free(p->host[i]);
    if (p->host_grad) free(p->host_grad[i]);
    if (p->dev) nn_cuda_free(p->dev[i]);
    if (p->dev_grad) nn_cuda_free(p->dev_grad[i]);
  }
  free(p->numel);
  free(p->host);
  free(p->host_grad);
  free(p->dev);
  free(p->dev_grad);
  memset(p, 0, sizeof *p);
}

static int params_make(const mlp_shape *s, int f_local, uint64_t seed,
                       params *p, char *msg, size_t len) {
  memset(p, 0, sizeof *p);
  p->np = mlp_num_params(s);
  size_t np = (size_t)p->np;
  p->numel = calloc(np, sizeof *p->numel);
  p->host = calloc(np, sizeof *p->host);
  p->host_grad = calloc(np, sizeof *p->host_grad);
  p->dev = calloc(np, sizeof *p->dev);
  p->dev_grad = calloc(np, sizeof *p->dev_grad);
  if (!p->numel || !p->host || !p->host_grad || !p->dev || !p->dev_grad)
    return failf(msg, len, "out of memory");
  int head = mlp_head_param(s);
  uint64_t st = seed * 977 + 5;
  for (int i = 0; i < p->np; i++) {
    int nd, ld;
    int64_t full[2], loc[2];
    char name[64];
    mlp_param_info(s, i, name, sizeof name, &nd, full);
    mlp_local_shape(s, f_local, i, &ld, loc);
    int64_t fn = nd == 2 ? full[0] * full[1] : full[0];
    int64_t ln = ld == 2 ? loc[0] * loc[1] : loc[0];
    p->numel[i] = ln;
    float *f = calloc((size_t)fn + 1, sizeof(float));
    p->host[i] = calloc((size_t)ln + 1, sizeof(float));
    p->host_grad[i] = calloc((size_t)ln + 1, sizeof(float));
    if (!f || !p->host[i] || !p->host_grad[i]) {
      free(f);
      return failf(msg, len, "out of memory");
    }
    mlp_init_param(s, i, seed, f);
    /* norm weights and biases start at 1 and 0: perturb them so their
     * gradients are exercised with non-trivial values */
    int slot = (i - 2) % BLK_SLOTS;
    if (i >= 2 && i < head && (slot == BLK_LN_G || slot == BLK_LN_B))
      for (int64_t k = 0; k < fn; k++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        f[k] += (float)((double)(st >> 40) / 16777216.0 - 0.5) * 0.4f;
      }
    int is_fc2_w = i >= 2 && i < head && slot == BLK_FC2_W;
    for (int64_t k = 0; k < ln; k++) {
      /* fc2 weight [H, F]: the first f_local columns; others: a prefix */
      p->host[i][k] = is_fc2_w ? f[(k / loc[1]) * full[1] + k % loc[1]] : f[k];
    }
    free(f);
    void *d = NULL, *dg = NULL;
    if (nn_cuda_alloc(&d, sizeof(float) * (size_t)ln, "a parameter") != 0 ||
        (p->dev[i] = d,
         nn_cuda_alloc(&dg, sizeof(float) * (size_t)ln, "a gradient")) != 0 ||
        (p->dev_grad[i] = dg,
         nn_cuda_to_device(d, p->host[i], sizeof(float) * (size_t)ln)) != 0)
      return failf(msg, len, "%s", nn_cuda_last_error());
  }
  return 0;
}

/* max |a - b| over max(max |b|, 1e-6) */
static double rel_diff(const float *a, const float *b, int64_t n) {
  double d = 0, mx = 1e-6;
  for (int64_t k = 0; k < n; k++) {
    double e = fabs((double)a[k] - (double)b[k]);
    if (e > d || e != e) d = e;
    if (fabs((double)b[k]) > mx) mx = fabs((double)b[k]);
  }
  return d / mx;
}

/* One forward + backward of both models on the same batch. */
static int compare_step(const mlp_shape *s, int f_local, int batch,
                        uint64_t seed, char *msg, size_t len) {
  params p;
  mlp_model cpu;
  mlp_cuda_model gpu;
  memset(&cpu, 0, sizeof cpu);
  memset(&gpu, 0, sizeof gpu);
  float *x = malloc(sizeof(float) * (size_t)batch * (size_t)s->d_in + 1);
  int *labels = malloc(sizeof(int) * (size_t)batch + 1);
  float *got = NULL;
  int rc = 1;
  if (params_make(s, f_local, seed, &p, msg, len) != 0) goto done;
  if (!x || !labels) {
    failf(msg, len, "out of memory");
    goto done;
  }
  mlp_make_batch(s, seed, 3, batch, x, labels);
  if (mlp_model_init(&cpu, s, f_local, batch, p.host, p.host_grad) != 0) {
    failf(msg, len, "mlp_model_init failed");
    goto done;
  }
  if (mlp_cuda_model_init(&gpu, s, f_local, batch, p.dev, p.dev_grad) != 0) {
    failf(msg, len, "mlp_cuda_model_init: %s", nn_cuda_last_error());
    goto done;
  }
  mlp_timers t = {0, 0};
  double loss_cpu = 0, loss_gpu = 0;
  mlp_forward(&cpu, x, labels, (float)batch, NULL, NULL, &loss_cpu, &t);
  mlp_backward(&cpu, NULL, NULL, NULL, NULL, &t);
  if (mlp_cuda_forward(&gpu, x, labels, (float)batch, NULL, NULL, &loss_gpu) !=
          0 ||
      mlp_cuda_backward(&gpu, NULL, NULL, NULL, NULL) != 0 ||
      nn_cuda_stream_sync(gpu.stream) != 0) {
    failf(msg, len, "GPU step: %s", nn_cuda_last_error());
    goto done;
  }
  double lrel = fabs(loss_gpu - loss_cpu) / fmax(fabs(loss_cpu), 1e-12);
  if (!(lrel <= 1e-5)) {
    failf(msg, len, "loss sum: gpu %.9g cpu %.9g (rel %.3g > 1e-5)", loss_gpu,
          loss_cpu, lrel);
    goto done;
  }
  for (int i = 0; i < p.np; i++) {
    int64_t n = p.numel[i];
    free(got);
    got = malloc(sizeof(float) * (size_t)n + 1);
    if (!got) {
      failf(msg, len, "out of memory");
      goto done;
    }
    if (nn_cuda_to_host(got, p.dev_grad[i], sizeof(float) * (size_t)n) != 0) {
      failf(msg, len, "%s", nn_cuda_last_error());
      goto done;
    }
    double r = rel_diff(got, p.host_grad[i], n);
    if (!(r <= 1e-4)) {
      char name[64];
      int nd;
      int64_t shp[2];
      mlp_param_info(s, i, name, sizeof name, &nd, shp);
      failf(msg, len,
            "gradient of %s (param %d, %lld local elements): "
            "max diff %.3g relative to its largest entry (> 1e-4)",
            name, i, (long long)n, r);
      goto done;
    }
  }
  rc = 0;
done:
  mlp_model_free(&cpu);
  mlp_cuda_model_free(&gpu);
  params_free(&p);
  free(got);
  free(x);
  free(labels);
  return rc;
}

/* Wider than a warp (hidden 45, classes 37) and a batch not a multiple of
 * the rows per block. */
static const mlp_shape WIDE = {7, 45, 19, 37, 2};

static int check_full_ffn(char *msg, size_t len) {
  return compare_step(&WIDE, WIDE.ffn, 9, 11, msg, len);
}

static int check_ffn_slice(char *msg, size_t len) {
  return compare_step(&WIDE, 7, 9, 12, msg, len);
}

static int check_empty_ffn_slice(char *msg, size_t len) {
  mlp_shape s = {5, 12, 3, 4, 1};
  return compare_step(&s, 0, 6, 13, msg, len);
}

static int check_no_blocks(char *msg, size_t len) {
  mlp_shape s = {16, 32, 67, 10, 0};
  return compare_step(&s, 67, 64, 1, msg, len);
}

static int check_default_shape(char *msg, size_t len) {
  mlp_shape s = {16, 32, 67, 10, 2}; /* train_mlp's defaults */
  return compare_step(&s, 67, 64, 1, msg, len);
}

static int check_adamw(char *msg, size_t len) {
  enum { N = 1000 };
  float p[N], g[N], m[N], v[N], got[N];
  uint64_t st = 42;
  for (int k = 0; k < N; k++) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    p[k] = (float)((double)(st >> 40) / 16777216.0 - 0.5);
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    g[k] = (float)((double)(st >> 40) / 16777216.0 - 0.5) * 0.01f;
    m[k] = v[k] = 0;
  }
  void *dp = NULL, *dg = NULL, *dm = NULL, *dv = NULL;
  int rc = 1;
  if (nn_cuda_alloc(&dp, sizeof p, "a check buffer") ||
      nn_cuda_alloc(&dg, sizeof g, "a check buffer") ||
      nn_cuda_alloc(&dm, sizeof m, "a check buffer") ||
      nn_cuda_alloc(&dv, sizeof v, "a check buffer") ||
      nn_cuda_to_device(dp, p, sizeof p) ||
      nn_cuda_to_device(dg, g, sizeof g)) {
    failf(msg, len, "%s", nn_cuda_last_error());
    goto done;
  }
  /* train_mlp's AdamW (mlp_adamw_opts at the default --lr) */
  const nn_adamw_opts o = {3e-3, 0.9, 0.999, 1e-8};
  for (int step = 1; step <= 3; step++) {
    nn_adamw(p, g, m, v, N, &o, 0.01, step);
    if (nn_cuda_adamw(dp, dg, dm, dv, N, &o, 0.01, step, NULL) != 0) {
      failf(msg, len, "%s", nn_cuda_last_error());
      goto done;
    }
  }
  if (nn_cuda_to_host(got, dp, sizeof got) != 0) {
    failf(msg, len, "%s", nn_cuda_last_error());
    goto done;
  }
  /* The same bits: both run adamw.h's nn_adamw_element, each operation
   * rounded alike (no fused multiply-adds on the device). */
  for (int k = 0; k < N; k++)
    if (memcmp(&got[k], &p[k], sizeof(float)) != 0) {
      failf(msg, len, "AdamW element %d: gpu %.9g cpu %.9g (not bitwise equal)",
            k, got[k], p[k]);
      goto done;
    }
  rc = 0;
done:
  nn_cuda_free(dp);
  nn_cuda_free(dg);
  nn_cuda_free(dm);
  nn_cuda_free(dv);
  return rc;
}

const mlp_cuda_check mlp_cuda_checks[] = {
    {"FullFfn", check_full_ffn},
    {"FfnSlice", check_ffn_slice},
    {"EmptyFfnSlice", check_empty_ffn_slice},
    {"NoBlocks", check_no_blocks},
    {"DefaultShape", check_default_shape},
    {"AdamW", check_adamw},
};
const int mlp_cuda_check_count =
    (int)(sizeof mlp_cuda_checks / sizeof mlp_cuda_checks[0]);
