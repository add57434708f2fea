// SPDX-License-Identifier: BSD-3-Clause
// nn_cuda.h: bias and residual adds, tanh-GELU forward and backward.
#include "examples/common/nn_cuda/kernels.cuh"

static __global__ void k_bias_add(float *Y, const float *b, int64_t N, int C) {
  GRID_STRIDE(k, N * C) Y[k] += b[k % C];
}

extern "C" int nn_cuda_bias_add(float *Y, const float *b, int64_t N, int C,
                                void *stream) {
  if (N * C == 0) return 0;
  k_bias_add<<<grid_for(N * C), THREADS, 0, S(stream)>>>(Y, b, N, C);
  LAUNCHED(k_bias_add);
  return 0;
}

static __global__ void k_residual(const float *a, const float *r,
                                  const float *b, float *out, int64_t N,
                                  int C) {
  GRID_STRIDE(k, N * C) out[k] = a[k] + r[k] + b[k % C];
}

extern "C" int nn_cuda_residual(const float *a, const float *r, const float *b,
                                float *out, int64_t N, int C, void *stream) {
  if (N * C == 0) return 0;
  k_residual<<<grid_for(N * C), THREADS, 0, S(stream)>>>(a, r, b, out, N, C);
  LAUNCHED(k_residual);
  return 0;
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

static __global__ void k_gelu_fwd(const float *x, float *y, int64_t n) {
  GRID_STRIDE(k, n) {
    float v = x[k];
    y[k] = 0.5f * v * (1.0f + tanhf(GELU_K * (v + GELU_C * v * v * v)));
  }
}

static __global__ void k_gelu_bwd(const float *x, float *d, int64_t n) {
  GRID_STRIDE(k, n) {
    float v = x[k];
    float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
    float dt = (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
    d[k] *= 0.5f * (1.0f + t) + 0.5f * v * dt;
  }
}

extern "C" int nn_cuda_gelu_fwd(const float *x, float *y, int64_t n,
                                void *stream) {
  if (n == 0) return 0;
  k_gelu_fwd<<<grid_for(n), THREADS, 0, S(stream)>>>(x, y, n);
  LAUNCHED(k_gelu_fwd);
  return 0;
}

extern "C" int nn_cuda_gelu_bwd(const float *x, float *d, int64_t n,
                                void *stream) {
  if (n == 0) return 0;
  k_gelu_bwd<<<grid_for(n), THREADS, 0, S(stream)>>>(x, d, n);
  LAUNCHED(k_gelu_bwd);
  return 0;
}
