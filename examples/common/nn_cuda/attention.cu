// SPDX-License-Identifier: BSD-3-Clause
// nn_cuda.h: attention's causal softmax, forward and backward.
#include "examples/common/nn_cuda/kernels.cuh"

// One warp per row: (max, sum of exponentials) in one pass over the row
// (rescaling the sum when the max grows), then the normalised row.
static __global__ void k_causal_softmax_fwd(float *Sc, int64_t rows, int T) {
  const int64_t row = (int64_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int valid = (int)(row % T) + 1;
  float *s = Sc + row * T;
  float mx = -INFINITY, sum = 0.0f;
  for (int k = lane; k < valid; k += 32) {
    float v = s[k];
    if (v > mx) {
      sum = sum * expf(mx - v) + 1.0f;
      mx = v;
    } else {
      sum += expf(v - mx);
    }
  }
  const float gmx = warp_max(mx);
  sum = mx == -INFINITY ? 0.0f : sum * expf(mx - gmx);
  const float inv = 1.0f / warp_sumf(sum);
  for (int k = lane; k < T; k += 32)
    s[k] = k < valid ? expf(s[k] - gmx) * inv : 0.0f;
}

extern "C" int nn_cuda_causal_softmax_fwd(float *Sc, int64_t rows, int T,
                                          void *stream) {
  if (rows == 0 || T == 0) return 0;
  k_causal_softmax_fwd<<<grid_rows(rows), 32 * ROW_WARPS, 0, S(stream)>>>(
      Sc, rows, T);
  LAUNCHED(k_causal_softmax_fwd);
  return 0;
}

static __global__ void k_causal_softmax_bwd(const float *P, float *dP,
                                            int64_t rows, int T) {
  const int64_t row = (int64_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int valid = (int)(row % T) + 1;
  const float *p = P + row * T;
  float *d = dP + row * T;
  float dot = 0.0f;
  for (int k = lane; k < valid; k += 32) dot += p[k] * d[k];
  dot = warp_sumf(dot);
  for (int k = lane; k < T; k += 32)
    d[k] = k < valid ? p[k] * (d[k] - dot) : 0.0f;
}

extern "C" int nn_cuda_causal_softmax_bwd(const float *P, float *dP,
                                          int64_t rows, int T, void *stream) {
  if (rows == 0 || T == 0) return 0;
  k_causal_softmax_bwd<<<grid_rows(rows), 32 * ROW_WARPS, 0, S(stream)>>>(
      P, dP, rows, T);
  LAUNCHED(k_causal_softmax_bwd);
  return 0;
}
