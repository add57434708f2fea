// SPDX-License-Identifier: BSD-3-Clause
// Checked CUDA and cuBLAS calls for the examples' .cu files: a failure
// records the call and CUDA's (cuBLAS's) message with nn_cuda_fail and
// returns 1 from the enclosing function.
#ifndef TPDP_EXAMPLES_COMMON_NN_CUDA_CHECK_CUH
#define TPDP_EXAMPLES_COMMON_NN_CUDA_CHECK_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "examples/common/nn_cuda.h"

#define CUDA_TRY(call)                                                 \
  do {                                                                 \
    cudaError_t e_ = (call);                                           \
    if (e_ != cudaSuccess)                                             \
      return nn_cuda_fail("%s: %s (%s)", #call, cudaGetErrorString(e_), \
                          cudaGetErrorName(e_));                       \
  } while (0)

#define CUBLAS_TRY(call)                                               \
  do {                                                                 \
    cublasStatus_t s_ = (call);                                        \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                   \
      return nn_cuda_fail("%s: %s", #call, cublasGetStatusString(s_)); \
  } while (0)

// A kernel launch: launch errors now, execution errors at the next wait.
#define LAUNCHED(name)                                                 \
  do {                                                                 \
    cudaError_t e_ = cudaGetLastError();                               \
    if (e_ != cudaSuccess)                                             \
      return nn_cuda_fail("launching %s: %s", #name,                   \
                          cudaGetErrorString(e_));                     \
  } while (0)

#endif
