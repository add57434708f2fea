// SPDX-License-Identifier: BSD-3-Clause
// Device kernels behind core/tensor_cuda.c: an N-D strided copy and a
// strided zero fill. Compiled by nvcc through the genrule in core/BUILD
// (sm_80, sm_90 and PTX for later GPUs) and called through the plain C
// launchers at the bottom, so the rest of tpdp stays C11.
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/tensor_cuda.h"

namespace {

// Byte offset of linear element `i` (row-major over shape) in a tensor with
// the given element strides.
__device__ __forceinline__ int64_t offset_of(int64_t i,
                                             const core_cuda_layout &l,
                                             const int64_t *strides) {
  int64_t off = 0;
  for (int k = l.ndim - 1; k >= 0; k--) {
    int64_t c = i % l.shape[k];
    i /= l.shape[k];
    off += c * strides[k];
  }
  return off;
}

template <typename T>
__global__ void strided_copy(T *dst, const T *src, core_cuda_layout l) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < l.numel;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[offset_of(i, l, l.dst_strides)] = src[offset_of(i, l, l.src_strides)];
}

template <typename T>
__global__ void strided_zero(T *dst, core_cuda_layout l) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < l.numel;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[offset_of(i, l, l.dst_strides)] = T(0);
}

unsigned grid_for(int64_t n) {
  int64_t blocks = (n + 255) / 256;
  if (blocks > 65535) blocks = 65535;  // grid-stride loop covers the rest
  return blocks < 1 ? 1u : (unsigned)blocks;
}

// The launches of each kernel for an element type T (an unsigned integer
// of the element's size: the kernels only move bytes).
struct copy_launch {
  void *dst;
  const void *src;
  template <typename T>
  void run(unsigned g, cudaStream_t s, const core_cuda_layout &l) const {
    strided_copy<T><<<g, 256, 0, s>>>((T *)dst, (const T *)src, l);
  }
};

struct zero_launch {
  void *dst;
  template <typename T>
  void run(unsigned g, cudaStream_t s, const core_cuda_layout &l) const {
    strided_zero<T><<<g, 256, 0, s>>>((T *)dst, l);
  }
};

// Launch `k` for elements of elem_size bytes (1, 2, 4 or 8) on `stream`;
// the CUDA error code of the launch (cudaErrorInvalidValue for another
// size).
template <typename Launch>
int launch_by_size(const Launch &k, size_t elem_size,
                   const core_cuda_layout *layout, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  unsigned g = grid_for(layout->numel);
  switch (elem_size) {
    case 1:
      k.template run<uint8_t>(g, s, *layout);
      break;
    case 2:
      k.template run<uint16_t>(g, s, *layout);
      break;
    case 4:
      k.template run<uint32_t>(g, s, *layout);
      break;
    case 8:
      k.template run<uint64_t>(g, s, *layout);
      break;
    default:
      return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}

}  // namespace

extern "C" int core_cuda_launch_strided_copy(void *dst, const void *src,
                                             size_t elem_size,
                                             const core_cuda_layout *layout,
                                             void *stream) {
  return launch_by_size(copy_launch{dst, src}, elem_size, layout, stream);
}

extern "C" int core_cuda_launch_strided_zero(void *dst, size_t elem_size,
                                             const core_cuda_layout *layout,
                                             void *stream) {
  return launch_by_size(zero_launch{dst}, elem_size, layout, stream);
}
