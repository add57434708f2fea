// SPDX-License-Identifier: BSD-3-Clause
// Device kernels of the reducer's bucket memory (dp/bucket_passes.c, CUDA path):
// divide in place and cast-with-divide between the float dtypes, for the
// averaging and the bf16/f16 compression hooks. Compiled by nvcc through
// the genrule in dp/BUILD (sm_80, sm_90, PTX for later GPUs) and by
// scripts/gpu-check; called through the C launchers in dp/bucket_passes_cuda.h.
// The arithmetic mirrors the host path so both give the same bits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "dp/bucket_passes_cuda.h"

namespace {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(double v) { return (float)v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ double from_float<double>(float v) {
  return (double)v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Every element divided in double (f64 -> f64 only).
__global__ void divide_f64(const double *src, double *dst, size_t n,
                           double divisor) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i] / divisor;
}

// dst may alias src (in-place divide): each thread reads before it writes
// its own element.
template <typename S, typename D>
__global__ void cast_divide(const S *src, D *dst, size_t n, float divisor) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = from_float<D>(to_float(src[i]) / divisor);
}

unsigned grid_for(size_t n) {
  size_t blocks = (n + 255) / 256;
  if (blocks > 65535) blocks = 65535;  // the grid-stride loop covers the rest
  return blocks < 1 ? 1u : (unsigned)blocks;
}

template <typename S>
int launch_to(const S *src, tpdp_dtype dst_dtype, void *dst, size_t n,
              float divisor, cudaStream_t s) {
  unsigned g = grid_for(n);
  switch (dst_dtype) {
    case TPDP_F32:
      cast_divide<S, float><<<g, 256, 0, s>>>(src, (float *)dst, n, divisor);
      break;
    case TPDP_F64:
      cast_divide<S, double><<<g, 256, 0, s>>>(src, (double *)dst, n, divisor);
      break;
    case TPDP_F16:
      cast_divide<S, __half><<<g, 256, 0, s>>>(src, (__half *)dst, n, divisor);
      break;
    case TPDP_BF16:
      cast_divide<S, __nv_bfloat16>
          <<<g, 256, 0, s>>>(src, (__nv_bfloat16 *)dst, n, divisor);
      break;
    default:
      return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}

}  // namespace

extern "C" int dp_cuda_launch_cast_divide(tpdp_dtype src_dtype, const void *src,
                                          tpdp_dtype dst_dtype, void *dst,
                                          size_t n, double divisor,
                                          void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  if (n == 0) return (int)cudaSuccess;
  if (src_dtype == TPDP_F64 && dst_dtype == TPDP_F64) {
    divide_f64<<<grid_for(n), 256, 0, s>>>((const double *)src, (double *)dst,
                                           n, divisor);
    return (int)cudaGetLastError();
  }
  const float d = (float)divisor;
  switch (src_dtype) {
    case TPDP_F32:
      return launch_to((const float *)src, dst_dtype, dst, n, d, s);
    case TPDP_F64:
      return launch_to((const double *)src, dst_dtype, dst, n, d, s);
    case TPDP_F16:
      return launch_to((const __half *)src, dst_dtype, dst, n, d, s);
    case TPDP_BF16:
      return launch_to((const __nv_bfloat16 *)src, dst_dtype, dst, n, d, s);
    default:
      return (int)cudaErrorInvalidValue;
  }
}
