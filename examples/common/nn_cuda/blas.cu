// SPDX-License-Identifier: BSD-3-Clause
// nn_cuda.h: cuBLAS handles and sgemm (empty products included).
#include <cublas_v2.h>

#include "examples/common/nn_cuda/kernels.cuh"

extern "C" int nn_cuda_blas_create(void **handle, void *stream, int tf32) {
  cublasHandle_t h = NULL;
  *handle = NULL;
  CUBLAS_TRY(cublasCreate(&h));
  cublasStatus_t s = cublasSetStream(h, S(stream));
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasSetMathMode(
        h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH);
  if (s != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(h);
    return nn_cuda_fail("cublasSetStream/cublasSetMathMode: %s",
                        cublasGetStatusString(s));
  }
  *handle = h;
  return 0;
}

extern "C" void nn_cuda_blas_destroy(void *handle) {
  if (handle) cublasDestroy((cublasHandle_t)handle);
}

// C (column-major m x n, ldc) *= beta: a product over k = 0.
__global__ void k_scale_2d(float *C, int m, int n, int ldc, float beta) {
  GRID_STRIDE(k, (int64_t)m * n) {
    float *c = C + (k / m) * ldc + k % m;
    *c = beta == 0.0f ? 0.0f : *c * beta;
  }
}

static int empty_product(void *blas, int m, int n, float beta, float *C,
                         int ldc, int64_t sc, int batch) {
  cudaStream_t st = NULL;
  CUBLAS_TRY(cublasGetStream((cublasHandle_t)blas, &st));
  for (int i = 0; i < batch; i++) {
    k_scale_2d<<<grid_for((int64_t)m * n), THREADS, 0, st>>>(C + i * sc, m, n,
                                                             ldc, beta);
    LAUNCHED(k_scale_2d);
  }
  return 0;
}

static cublasOperation_t op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

extern "C" int nn_cuda_sgemm(void *blas, int ta, int tb, int m, int n, int k,
                             float alpha, const float *A, int lda,
                             const float *B, int ldb, float beta, float *C,
                             int ldc) {
  if (m == 0 || n == 0) return 0;
  if (k == 0) return empty_product(blas, m, n, beta, C, ldc, 0, 1);
  CUBLAS_TRY(cublasSgemm((cublasHandle_t)blas, op(ta), op(tb), m, n, k, &alpha,
                         A, lda, B, ldb, &beta, C, ldc));
  return 0;
}

extern "C" int nn_cuda_sgemm_batched(void *blas, int ta, int tb, int m, int n,
                                     int k, float alpha, const float *A,
                                     int lda, int64_t sa, const float *B,
                                     int ldb, int64_t sb, float beta, float *C,
                                     int ldc, int64_t sc, int batch) {
  if (m == 0 || n == 0 || batch == 0) return 0;
  if (k == 0) return empty_product(blas, m, n, beta, C, ldc, sc, batch);
  CUBLAS_TRY(cublasSgemmStridedBatched((cublasHandle_t)blas, op(ta), op(tb), m,
                                       n, k, &alpha, A, lda, sa, B, ldb, sb,
                                       &beta, C, ldc, sc, batch));
  return 0;
}
