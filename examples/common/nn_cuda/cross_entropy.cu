// SPDX-License-Identifier: BSD-3-Clause
// nn_cuda.h: the vocabulary-parallel cross-entropy and the fixed-order sum
// of doubles its loss uses.
#include "examples/common/nn_cuda/kernels.cuh"

static const int XENT_THREADS = 512;

// (max, sum of exp(z - max)) pairs combined: the sum rescaled to the larger
// max; an empty part (sum 0) contributes nothing.
static __device__ inline void combine(float &m, double &s, float m2,
                                      double s2) {
  if (s2 == 0.0) return;
  if (s == 0.0) {
    m = m2;
    s = s2;
    return;
  }
  float M = fmaxf(m, m2);
  s = s * exp((double)(m - M)) + s2 * exp((double)(m2 - M));
  m = M;
}

// One block per row: this rank's (max, sum) in one pass, combined over the
// block in a fixed order.
static __global__ void k_xent_stats(const float *logits, int64_t ld,
                                    const int32_t *targets, int v0, int vl,
                                    float *row_max, double *pair) {
  __shared__ float sm[XENT_THREADS / 32];
  __shared__ double ss[XENT_THREADS / 32];
  const int64_t i = blockIdx.x;
  const float *z = logits + i * ld;
  float m = -INFINITY;
  double s = 0.0;
  for (int j = threadIdx.x; j < vl; j += blockDim.x) {
    float v = z[j];
    if (v > m) {
      s = s * exp((double)(m - v)) + 1.0;
      m = v;
    } else {
      s += (double)expf(v - m);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    double s2 = __shfl_xor_sync(0xffffffffu, s, o);
    combine(m, s, m2, s2);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = sm[0];
    double Ssum = ss[0];
    for (int w = 1; w < (int)blockDim.x / 32; w++)
      combine(M, Ssum, sm[w], ss[w]);
    row_max[i] = M;
    pair[2 * i] = Ssum;
    int t = targets[i] - v0;
    pair[2 * i + 1] = t >= 0 && t < vl ? (double)z[t] : 0.0;
  }
}

extern "C" int nn_cuda_xent_stats(const float *logits, int64_t ld,
                                  const int32_t *targets, int64_t n, int v0,
                                  int vl, float *row_max, double *pair,
                                  void *stream) {
  if (n == 0) return 0;
  k_xent_stats<<<(unsigned)n, XENT_THREADS, 0, S(stream)>>>(
      logits, ld, targets, v0, vl, row_max, pair);
  LAUNCHED(k_xent_stats);
  return 0;
}

static __global__ void k_xent_rescale(const float *row_max,
                                      const float *global_max, double *pair,
                                      int64_t n) {
  GRID_STRIDE(i, n) {
    if (pair[2 * i] != 0.0)
      pair[2 * i] *= exp((double)row_max[i] - (double)global_max[i]);
  }
}

extern "C" int nn_cuda_xent_rescale(const float *row_max,
                                    const float *global_max, double *pair,
                                    int64_t n, void *stream) {
  if (n == 0 || row_max == global_max) return 0;
  k_xent_rescale<<<grid_for(n), THREADS, 0, S(stream)>>>(row_max, global_max,
                                                         pair, n);
  LAUNCHED(k_xent_rescale);
  return 0;
}

static __global__ void k_xent_grad(float *logits, int64_t ld,
                                   const int32_t *targets, int v0, int vl,
                                   const float *global_max, const double *pair,
                                   float grad_scale, double *row_loss) {
  const int64_t i = blockIdx.x;
  float *z = logits + i * ld;
  const double S = pair[2 * i];
  const float M = global_max[i];
  const float scale = (float)(grad_scale / S);
  const int t = targets[i] - v0;
  for (int j = threadIdx.x; j < vl; j += blockDim.x) {
    float e = expf(z[j] - M) * scale;
    z[j] = j == t ? e - grad_scale : e;
  }
  if (threadIdx.x == 0) row_loss[i] = log(S) + (double)M - pair[2 * i + 1];
}

extern "C" int nn_cuda_xent_grad(float *logits, int64_t ld,
                                 const int32_t *targets, int64_t n, int v0,
                                 int vl, const float *global_max,
                                 const double *pair, float grad_scale,
                                 double *row_loss, void *stream) {
  if (n == 0) return 0;
  k_xent_grad<<<(unsigned)n, XENT_THREADS, 0, S(stream)>>>(
      logits, ld, targets, v0, vl, global_max, pair, grad_scale, row_loss);
  LAUNCHED(k_xent_grad);
  return 0;
}

// One block: strided partial sums, then a fixed tree.
static __global__ void k_sum_f64(const double *x, int64_t n, double *out) {
  __shared__ double sh[1024];
  double s = 0.0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += x[k];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

extern "C" int nn_cuda_sum_f64(const double *x, int64_t n, double *out,
                               void *stream) {
  k_sum_f64<<<1, 1024, 0, S(stream)>>>(x, n, out);
  LAUNCHED(k_sum_f64);
  return 0;
}
