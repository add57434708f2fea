// SPDX-License-Identifier: BSD-3-Clause
// nn_cuda.h: LayerNorm forward and backward.
#include "examples/common/nn_cuda/colsum.cuh"

// One warp per row; sums in double as nn_layernorm_fwd.
static __global__ void k_layernorm_fwd(const float *X, const float *g,
                                       const float *b, float *Y, float *mean,
                                       float *rstd, int N, int C, float eps) {
  const int64_t row = (int64_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;  // uniform over the warp
  const float *x = X + row * C;
  double s = 0;
  for (int k = lane; k < C; k += 32) s += x[k];
  const float mu = (float)(warp_sum(s) / C);
  double ss = 0;
  for (int k = lane; k < C; k += 32) {
    float d = x[k] - mu;
    ss += (double)d * d;
  }
  const float r = (float)(1.0 / sqrt(warp_sum(ss) / C + (double)eps));
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
  float *y = Y + row * C;
  for (int k = lane; k < C; k += 32) y[k] = (x[k] - mu) * r * g[k] + b[k];
}

extern "C" int nn_cuda_layernorm_fwd(const float *X, const float *g,
                                     const float *b, float *Y, float *mean,
                                     float *rstd, int N, int C, float eps,
                                     void *stream) {
  if (N == 0 || C == 0) return 0;
  k_layernorm_fwd<<<grid_rows(N), 32 * ROW_WARPS, 0, S(stream)>>>(
      X, g, b, Y, mean, rstd, N, C, eps);
  LAUNCHED(k_layernorm_fwd);
  return 0;
}

static __global__ void k_layernorm_bwd_x(const float *X, const float *g,
                                         const float *mean, const float *rstd,
                                         const float *dY, float *dX, int N,
                                         int C) {
  const int64_t row = (int64_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float *x = X + row * C, *dy = dY + row * C;
  const float mu = mean[row], r = rstd[row];
  double s1 = 0, s2 = 0;
  for (int k = lane; k < C; k += 32) {
    float xhat = (x[k] - mu) * r;
    float dxhat = dy[k] * g[k];
    s1 += dxhat;
    s2 += (double)dxhat * xhat;
  }
  const float m1 = (float)(warp_sum(s1) / C), m2 = (float)(warp_sum(s2) / C);
  float *dx = dX + row * C;
  for (int k = lane; k < C; k += 32) {
    float xhat = (x[k] - mu) * r;
    dx[k] += r * (dy[k] * g[k] - m1 - xhat * m2);
  }
}

extern "C" int nn_cuda_layernorm_bwd(const float *X, const float *g,
                                     const float *mean, const float *rstd,
                                     const float *dY, float *dX, float *dg,
                                     float *db, int N, int C, float *scratch,
                                     void *stream) {
  if (C == 0) return 0;
  if (N > 0) {
    k_layernorm_bwd_x<<<grid_rows(N), 32 * ROW_WARPS, 0, S(stream)>>>(
        X, g, mean, rstd, dY, dX, N, C);
    LAUNCHED(k_layernorm_bwd_x);
  }
  ColsumLayernorm t = {X, dY, mean, rstd};
  return column_sums(t, N, C, scratch, dg, db, S(stream));
}
