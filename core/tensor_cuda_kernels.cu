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

}  // namespace

extern "C" int core_cuda_launch_strided_copy(void *dst, const void *src,
                                             size_t elem_size,
                                             const core_cuda_layout *layout,
                                             void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  unsigned g = grid_for(layout->numel);
  switch (elem_size) {
    case 1:
      strided_copy<uint8_t>
          <<<g, 256, 0, s>>>((uint8_t *)dst, (const uint8_t *)src, *layout);
      break;
    case 2:
      strided_copy<uint16_t>
          <<<g, 256, 0, s>>>((uint16_t *)dst, (const uint16_t *)src, *layout);
      break;
    case 4:
      strided_copy<uint32_t>
          <<<g, 256, 0, s>>>((uint32_t *)dst, (const uint32_t *)src, *layout);
      break;
    case 8:
      strided_copy<uint64_t>
          <<<g, 256, 0, s>>>((uint64_t *)dst, (const uint64_t *)src, *layout);
      break;
    default:
      return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}

extern "C" int core_cuda_launch_strided_zero(void *dst, size_t elem_size,
                                             const core_cuda_layout *layout,
                                             void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  unsigned g = grid_for(layout->numel);
  switch (elem_size) {
    case 1:
      strided_zero<uint8_t><<<g, 256, 0, s>>>((uint8_t *)dst, *layout);
      break;
    case 2:
      strided_zero<uint16_t><<<g, 256, 0, s>>>((uint16_t *)dst, *layout);
      break;
    case 4:
      strided_zero<uint32_t><<<g, 256, 0, s>>>((uint32_t *)dst, *layout);
      break;
    case 8:
      strided_zero<uint64_t><<<g, 256, 0, s>>>((uint64_t *)dst, *layout);
      break;
    default:
      return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}
