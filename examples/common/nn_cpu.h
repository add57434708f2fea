// SPDX-License-Identifier: BSD-3-Clause
/*
 * CPU kernels for the example models, row-major f32: linear layers in both
 * orientations (OpenBLAS sgemm), LayerNorm, tanh-GELU and AdamW with
 * PyTorch's semantics. Written so GCC vectorises the elementwise loops at
 * -O3 -fno-math-errno -fno-trapping-math (examples/BUILD builds them so):
 * exp and tanh come from nn_expf, a range-reduced polynomial, not libm.
 */
#ifndef TPDP_EXAMPLES_COMMON_NN_CPU_H
#define TPDP_EXAMPLES_COMMON_NN_CPU_H

#include <stdint.h>
#include <string.h>

#include "examples/common/adamw.h"

/* exp(x) within 2 ulp for x in [-87, 88] (clamped outside): x = n ln2 + r,
 * |r| <= ln2/2, exp(r) by its degree-6 Taylor polynomial, 2^n by the
 * exponent bits. Branch-free, so loops calling it vectorise. */
static inline float nn_expf(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float shifter = 12582912.0f; /* 1.5 * 2^23: rounds to an integer */
  float fn = x * 1.44269504088896341f + shifter;
  fn -= shifter;
  float r = x - fn * 0.693145751953125f;
  r -= fn * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits = ((int32_t)fn + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/* tanh(x) = 1 - 2 / (exp(2x) + 1), |x| clamped to 15 (tanh is 1 in f32). */
static inline float nn_tanhf(float x) {
  x = x < -15.0f ? -15.0f : x;
  x = x > 15.0f ? 15.0f : x;
  return 1.0f - 2.0f / (nn_expf(2.0f * x) + 1.0f);
}

/* Threads for OpenBLAS and for the elementwise kernels below (a pool of
 * this many, the caller included), 1 to 64. The kernels split long loops
 * into one contiguous range per thread; call them from one thread at a
 * time. */
void nn_set_threads(int n);
int nn_threads(void);

/* Y[N, out] = X[N, in] W + b, W [in, out] (Hugging Face Conv1D); b may be
 * NULL. */
void nn_conv1d_fwd(const float *X, const float *W, const float *b, float *Y,
                   int N, int in, int out);
/* Backward of nn_conv1d_fwd: dX = dY W^T (beta 0 overwrites, 1 adds),
 * dW = X^T dY and db = column sums of dY (grad_beta 0 overwrites them, 1
 * adds: gradient accumulation). Any of dX, dW, db may be NULL. */
void nn_conv1d_bwd(const float *X, const float *W, const float *dY, float *dX,
                   float *dW, float *db, int N, int in, int out, float beta,
                   float grad_beta);

/* Y[N, out] = X[N, in] W^T, W [out, in] (torch.nn.Linear, no bias). */
void nn_linear_fwd(const float *X, const float *W, float *Y, int N, int in,
                   int out);
/* dX = dY W (overwritten), dW = dY^T X (grad_beta 0 overwrites, 1 adds);
 * either may be NULL. */
void nn_linear_bwd(const float *X, const float *W, const float *dY, float *dX,
                   float *dW, int N, int in, int out, float grad_beta);

/* LayerNorm over the last dim (eps), biased variance as torch. mean, rstd:
 * [N], kept for the backward. */
void nn_layernorm_fwd(const float *X, const float *g, const float *b, float *Y,
                      float *mean, float *rstd, int N, int C, float eps);
/* dX += LayerNorm's input gradient; dg, db overwritten (grad_beta 0) or
 * added to (1). */
void nn_layernorm_bwd(const float *X, const float *g, const float *mean,
                      const float *rstd, const float *dY, float *dX, float *dg,
                      float *db, int N, int C, float grad_beta);

/* GELU, tanh approximation (Hugging Face "gelu_new", torch
 * gelu(approximate="tanh")). */
void nn_gelu_fwd(const float *x, float *y, int64_t n);
/* d <- d * GELU'(x), in place. */
void nn_gelu_bwd(const float *x, float *d, int64_t n);

/* torch.optim.AdamW's step (step counts from 1): p *= 1 - lr*wd; m, v
 * moments; p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
 * each element by adamw.h's nn_adamw_element (as nn_cuda_adamw). */
void nn_adamw(float *p, const float *g, float *m, float *v, int64_t n,
              const nn_adamw_opts *o, double weight_decay, int step);

#endif
