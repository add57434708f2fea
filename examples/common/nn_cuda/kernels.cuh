// SPDX-License-Identifier: BSD-3-Clause
// What the examples' CUDA kernels share (nn_cuda/*.cu and the models'
// .cu files): launch shapes, grid-stride loops, warp reductions, the
// stream cast.
// Device helpers are static inline here: each .cu file is compiled on its
// own (no relocatable device code), so each gets its copy.
#ifndef TPDP_EXAMPLES_COMMON_NN_CUDA_KERNELS_CUH
#define TPDP_EXAMPLES_COMMON_NN_CUDA_KERNELS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "examples/common/nn_cuda_check.cuh"

static inline cudaStream_t S(void *stream) { return (cudaStream_t)stream; }

static const int THREADS = 256;

static inline unsigned grid_for(int64_t n) {
  int64_t g = (n + THREADS - 1) / THREADS;
  if (g < 1) g = 1;
  if (g > 65535L * 16) g = 65535L * 16;  // the kernels loop over the rest
  return (unsigned)g;
}

#define GRID_STRIDE(k, n)                                                   \
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < (n); \
       k += (int64_t)gridDim.x * blockDim.x)

static __device__ inline double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

static __device__ inline float warp_sumf(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

static __device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

static const int ROW_WARPS = 4;  // warp-per-row kernels: 128 threads a block

static inline unsigned grid_rows(int64_t rows) {
  int64_t g = (rows + ROW_WARPS - 1) / ROW_WARPS;
  return (unsigned)(g < 1 ? 1 : g);
}

#endif
