// SPDX-License-Identifier: BSD-3-Clause
// GPU kernels and device helpers of the example models (see nn_cuda.h).
// Each kernel mirrors its nn_cpu.c counterpart's arithmetic where that
// matters for --check (accumulation types, the order of sums over rows).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/common/nn_cuda_check.cuh"

// ------------------------------------------------------------ errors

static thread_local char g_err[640];

extern "C" int nn_cuda_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_err, sizeof g_err, fmt, ap);
  va_end(ap);
  return 1;
}

extern "C" const char *nn_cuda_last_error(void) { return g_err; }

static cudaStream_t S(void *stream) { return (cudaStream_t)stream; }

// ------------------------------------------------------------ device

extern "C" int nn_cuda_device_count(int *count) {
  *count = 0;
  CUDA_TRY(cudaGetDeviceCount(count));
  return 0;
}

extern "C" int nn_cuda_use_device(int device, char *name, size_t len) {
  CUDA_TRY(cudaSetDevice(device));
  cudaDeviceProp prop;
  CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  if (name && len > 0) snprintf(name, len, "%s", prop.name);
  return 0;
}

static double gib(size_t bytes) { return (double)bytes / (1 << 30); }

extern "C" int nn_cuda_alloc(void **ptr, size_t bytes, const char *what) {
  *ptr = NULL;
  // +16: a valid, distinct pointer for an empty buffer.
  cudaError_t e = cudaMalloc(ptr, bytes + 16);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it
    size_t free_b = 0, total_b = 0;
    int dev = -1;
    cudaGetDevice(&dev);
    cudaMemGetInfo(&free_b, &total_b);
    *ptr = NULL;
    return nn_cuda_fail(
        "out of GPU memory allocating %.2f GiB for %s on cuda:%d (%.2f GiB "
        "free of %.2f GiB)",
        gib(bytes), what, dev, gib(free_b), gib(total_b));
  }
  if (e != cudaSuccess) {
    *ptr = NULL;
    return nn_cuda_fail("cudaMalloc(%zu bytes) for %s: %s", bytes + 16, what,
                        cudaGetErrorString(e));
  }
  e = cudaMemset(*ptr, 0, bytes + 16);
  if (e != cudaSuccess) {
    cudaFree(*ptr);
    *ptr = NULL;
    return nn_cuda_fail("cudaMemset(%zu bytes) for %s: %s", bytes + 16, what,
                        cudaGetErrorString(e));
  }
  return 0;
}

extern "C" void nn_cuda_free(void *ptr) {
  if (ptr) cudaFree(ptr);
}

extern "C" int nn_cuda_alloc_host(void **ptr, size_t bytes, const char *what) {
  *ptr = NULL;
  cudaError_t e = cudaMallocHost(ptr, bytes + 16);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *ptr = NULL;
    return nn_cuda_fail("cudaMallocHost(%zu bytes) for %s: %s", bytes + 16,
                        what, cudaGetErrorString(e));
  }
  memset(*ptr, 0, bytes + 16);
  return 0;
}

extern "C" void nn_cuda_free_host(void *ptr) {
  if (ptr) cudaFreeHost(ptr);
}

extern "C" int nn_cuda_to_device(void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return 0;
  CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  return 0;
}

extern "C" int nn_cuda_to_host(void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return 0;
  CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  return 0;
}

extern "C" int nn_cuda_copy_async(void *dst, const void *src, size_t bytes,
                                  void *stream) {
  if (bytes == 0) return 0;
  CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, S(stream)));
  return 0;
}

extern "C" int nn_cuda_copy_2d_async(void *dst, size_t dpitch, const void *src,
                                     size_t spitch, size_t width, size_t height,
                                     void *stream) {
  if (width == 0 || height == 0) return 0;
  CUDA_TRY(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height,
                             cudaMemcpyDefault, S(stream)));
  return 0;
}

extern "C" int nn_cuda_zero_async(void *dst, size_t bytes, void *stream) {
  if (bytes == 0) return 0;
  CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, S(stream)));
  return 0;
}

extern "C" int nn_cuda_stream_create(void **stream) {
  cudaStream_t s = NULL;
  // Default flags: the stream also orders itself with the legacy default
  // stream, which the synchronous copies above use.
  CUDA_TRY(cudaStreamCreate(&s));
  *stream = s;
  return 0;
}

extern "C" void nn_cuda_stream_destroy(void *stream) {
  if (stream) {
    cudaStreamSynchronize(S(stream));
    cudaStreamDestroy(S(stream));
  }
}

extern "C" int nn_cuda_stream_wait(void *waiter, void *producer) {
  if (waiter == producer) return 0;
  cudaEvent_t ev;
  CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaError_t e = cudaEventRecord(ev, S(producer));
  if (e == cudaSuccess) e = cudaStreamWaitEvent(S(waiter), ev, 0);
  cudaEventDestroy(ev);  // released once the wait has been satisfied
  if (e != cudaSuccess)
    return nn_cuda_fail("cudaEventRecord/cudaStreamWaitEvent: %s",
                        cudaGetErrorString(e));
  return 0;
}

extern "C" int nn_cuda_stream_sync(void *stream) {
  CUDA_TRY(cudaStreamSynchronize(S(stream)));
  return 0;
}

extern "C" int nn_cuda_event_create(void **event) {
  cudaEvent_t ev;
  CUDA_TRY(cudaEventCreate(&ev));
  *event = ev;
  return 0;
}

extern "C" void nn_cuda_event_destroy(void *event) {
  if (event) cudaEventDestroy((cudaEvent_t)event);
}

extern "C" int nn_cuda_event_record(void *event, void *stream) {
  CUDA_TRY(cudaEventRecord((cudaEvent_t)event, S(stream)));
  return 0;
}

extern "C" int nn_cuda_event_sync(void *event) {
  CUDA_TRY(cudaEventSynchronize((cudaEvent_t)event));
  return 0;
}

extern "C" int nn_cuda_event_elapsed(void *start, void *end, float *ms) {
  CUDA_TRY(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end));
  return 0;
}

// ------------------------------------------------------------ cuBLAS

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

static const int THREADS = 256;

static unsigned grid_for(int64_t n) {
  int64_t g = (n + THREADS - 1) / THREADS;
  if (g < 1) g = 1;
  if (g > 65535L * 16) g = 65535L * 16;  // the kernels loop over the rest
  return (unsigned)g;
}

#define GRID_STRIDE(k, n)                                                   \
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < (n); \
       k += (int64_t)gridDim.x * blockDim.x)

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

// ------------------------------------------------------------ reductions

__device__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float warp_sumf(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

static const int ROW_WARPS = 4;  // warp-per-row kernels: 128 threads a block

static unsigned grid_rows(int64_t rows) {
  int64_t g = (rows + ROW_WARPS - 1) / ROW_WARPS;
  return (unsigned)(g < 1 ? 1 : g);
}

// Column sums over rows in two passes: block (x, y) sums its 32 columns
// over row chunk y into partial[s][y][c] (8 row lanes, combined in a fixed
// order), then one thread per column adds the chunks in order. No atomics:
// the same bits every run.
static const int COL_TILE = 32, COL_LANES = 8, MAX_CHUNKS = 64;

static int col_chunks(int N) {
  int c = (N + 31) / 32;
  return c < 1 ? 1 : (c > MAX_CHUNKS ? MAX_CHUNKS : c);
}

extern "C" int64_t nn_cuda_colsum_scratch_floats(int N, int C, int sums) {
  return (int64_t)sums * col_chunks(N) * C;
}

// What is summed per column: dY itself (bias gradients), or LayerNorm's
// (dY * xhat, dY).
struct ColsumPlain {
  const float *X;
  __device__ void term(int64_t r, int64_t i, float *out) const {
    (void)r;
    out[0] = X[i];
  }
  static const int sums = 1;
};
struct ColsumLayernorm {
  const float *X, *dY, *mean, *rstd;
  __device__ void term(int64_t r, int64_t i, float *out) const {
    float xhat = (X[i] - mean[r]) * rstd[r];
    out[0] = dY[i] * xhat;
    out[1] = dY[i];
  }
  static const int sums = 2;
};

template <typename Term>
__global__ void k_col_partials(Term t, int N, int C, int chunk_rows,
                               float *partial) {
  __shared__ float sh[Term::sums][COL_LANES][COL_TILE];
  const int c = blockIdx.x * COL_TILE + threadIdx.x;
  const int r0 = blockIdx.y * chunk_rows;
  int r1 = r0 + chunk_rows;
  if (r1 > N) r1 = N;
  float acc[Term::sums];
  for (int s = 0; s < Term::sums; s++) acc[s] = 0.0f;
  if (c < C)
    for (int r = r0 + threadIdx.y; r < r1; r += COL_LANES) {
      float v[Term::sums];
      t.term(r, (int64_t)r * C + c, v);
      for (int s = 0; s < Term::sums; s++) acc[s] += v[s];
    }
  for (int s = 0; s < Term::sums; s++) sh[s][threadIdx.y][threadIdx.x] = acc[s];
  __syncthreads();
  if (threadIdx.y == 0 && c < C)
    for (int s = 0; s < Term::sums; s++) {
      float sum = 0.0f;
      for (int l = 0; l < COL_LANES; l++) sum += sh[s][l][threadIdx.x];
      partial[((int64_t)s * gridDim.y + blockIdx.y) * C + c] = sum;
    }
}

__global__ void k_col_finish(const float *partial, int chunks, int C,
                             float *out0, float *out1) {
  GRID_STRIDE(c, (int64_t)C) {
    float s0 = 0.0f, s1 = 0.0f;
    for (int y = 0; y < chunks; y++) {
      s0 += partial[(int64_t)y * C + c];
      if (out1) s1 += partial[((int64_t)chunks + y) * C + c];
    }
    out0[c] = s0;
    if (out1) out1[c] = s1;
  }
}

template <typename Term>
static int column_sums(const Term &t, int N, int C, float *scratch, float *out0,
                       float *out1, cudaStream_t st) {
  if (C == 0) return 0;
  if (N == 0) {
    CUDA_TRY(cudaMemsetAsync(out0, 0, sizeof(float) * (size_t)C, st));
    if (out1) CUDA_TRY(cudaMemsetAsync(out1, 0, sizeof(float) * (size_t)C, st));
    return 0;
  }
  int chunks = col_chunks(N);
  int chunk_rows = (N + chunks - 1) / chunks;
  chunks = (N + chunk_rows - 1) / chunk_rows;
  dim3 grid((C + COL_TILE - 1) / COL_TILE, chunks), block(COL_TILE, COL_LANES);
  k_col_partials<Term><<<grid, block, 0, st>>>(t, N, C, chunk_rows, scratch);
  LAUNCHED(k_col_partials);
  k_col_finish<<<grid_for(C), THREADS, 0, st>>>(scratch, chunks, C, out0, out1);
  LAUNCHED(k_col_finish);
  return 0;
}

extern "C" int nn_cuda_colsum(const float *X, float *out, int N, int C,
                              float *scratch, void *stream) {
  ColsumPlain t = {X};
  return column_sums(t, N, C, scratch, out, NULL, S(stream));
}

// ------------------------------------------------------------ LayerNorm

// One warp per row; sums in double as nn_layernorm_fwd.
__global__ void k_layernorm_fwd(const float *X, const float *g, const float *b,
                                float *Y, float *mean, float *rstd, int N,
                                int C, float eps) {
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

__global__ void k_layernorm_bwd_x(const float *X, const float *g,
                                  const float *mean, const float *rstd,
                                  const float *dY, float *dX, int N, int C) {
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

// ------------------------------------------------------------ elementwise

__global__ void k_bias_add(float *Y, const float *b, int64_t N, int C) {
  GRID_STRIDE(k, N * C) Y[k] += b[k % C];
}

extern "C" int nn_cuda_bias_add(float *Y, const float *b, int64_t N, int C,
                                void *stream) {
  if (N * C == 0) return 0;
  k_bias_add<<<grid_for(N * C), THREADS, 0, S(stream)>>>(Y, b, N, C);
  LAUNCHED(k_bias_add);
  return 0;
}

__global__ void k_residual(const float *a, const float *r, const float *b,
                           float *out, int64_t N, int C) {
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

__global__ void k_gelu_fwd(const float *x, float *y, int64_t n) {
  GRID_STRIDE(k, n) {
    float v = x[k];
    y[k] = 0.5f * v * (1.0f + tanhf(GELU_K * (v + GELU_C * v * v * v)));
  }
}

__global__ void k_gelu_bwd(const float *x, float *d, int64_t n) {
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

// AdamW as nn_adamw: the scalars in double on the host, used as f32.
__global__ void k_adamw(float *p, const float *g, float *m, float *v, int64_t n,
                        float decay, float b1, float b2, float a1, float a2,
                        float step_size, float bc2_sqrt, float eps) {
  GRID_STRIDE(k, n) {
    const float gk = g[k];
    const float mk = m[k] * b1 + gk * a1;
    const float vk = v[k] * b2 + gk * gk * a2;
    m[k] = mk;
    v[k] = vk;
    const float denom = sqrtf(vk) / bc2_sqrt + eps;
    p[k] = p[k] * decay - step_size * (mk / denom);
  }
}

extern "C" int nn_cuda_adamw(float *p, const float *g, float *m, float *v,
                             int64_t n, double lr, double beta1, double beta2,
                             double eps, double weight_decay, int step,
                             void *stream) {
  if (n == 0) return 0;
  k_adamw<<<grid_for(n), THREADS, 0, S(stream)>>>(
      p, g, m, v, n, (float)(1.0 - lr * weight_decay), (float)beta1,
      (float)beta2, (float)(1.0 - beta1), (float)(1.0 - beta2),
      (float)(lr / (1.0 - pow(beta1, step))),
      (float)sqrt(1.0 - pow(beta2, step)), (float)eps);
  LAUNCHED(k_adamw);
  return 0;
}

// ------------------------------------------------------------ attention

// One warp per row: (max, sum of exponentials) in one pass over the row
// (rescaling the sum when the max grows), then the normalised row.
__global__ void k_causal_softmax_fwd(float *Sc, int64_t rows, int T) {
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

__global__ void k_causal_softmax_bwd(const float *P, float *dP, int64_t rows,
                                     int T) {
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

// ------------------------------------------------------------ embedding

__global__ void k_embedding_fwd(const int32_t *ids, int64_t n, const float *wte,
                                int v0, int vl, const float *wpe, int T, int C,
                                float *out) {
  GRID_STRIDE(k, n * C) {
    const int64_t i = k / C;
    const int c = (int)(k % C);
    const int r = ids[i] - v0;
    float v = r >= 0 && r < vl ? wte[(int64_t)r * C + c] : 0.0f;
    if (wpe) v += wpe[(i % T) * C + c];
    out[k] = v;
  }
}

extern "C" int nn_cuda_embedding_fwd(const int32_t *ids, int64_t n,
                                     const float *wte, int v0, int vl,
                                     const float *wpe, int T, int C, float *out,
                                     void *stream) {
  if (n * C == 0) return 0;
  k_embedding_fwd<<<grid_for(n * C), THREADS, 0, S(stream)>>>(
      ids, n, wte, v0, vl, wpe, T, C, out);
  LAUNCHED(k_embedding_fwd);
  return 0;
}

extern "C" void nn_embedding_plan_make(const int32_t *ids, int64_t n, int v0,
                                       int vl, nn_embedding_plan *plan) {
  // A counting sort of the positions by local row, stable (positions stay
  // increasing within a row): count per row, each row's start, then place.
  int32_t *next = plan->row_work;
  memset(next, 0, sizeof *next * (size_t)vl);
  for (int64_t i = 0; i < n; i++) {
    int r = ids[i] - v0;
    if (r >= 0 && r < vl) next[r]++;
  }
  int segments = 0, start = 0;
  for (int r = 0; r < vl; r++) {
    if (next[r] == 0) continue;
    plan->seg_row[segments] = r;
    plan->seg_start[segments++] = start;
    int c = next[r];
    next[r] = start;
    start += c;
  }
  plan->seg_start[segments] = start;
  plan->segments = segments;
  for (int64_t i = 0; i < n; i++) {
    int r = ids[i] - v0;
    if (r >= 0 && r < vl) plan->order[next[r]++] = (int32_t)i;
  }
}

// One block per updated row: its positions' gradients added in position
// order into the row, as nn_cpu's loop does.
__global__ void k_embedding_bwd(const int32_t *order, const int32_t *seg_start,
                                const int32_t *seg_row, const float *dout,
                                int C, float *dwte) {
  const int s = blockIdx.x;
  const int j0 = seg_start[s], j1 = seg_start[s + 1];
  float *row = dwte + (int64_t)seg_row[s] * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = row[c];
    for (int j = j0; j < j1; j++) acc += dout[(int64_t)order[j] * C + c];
    row[c] = acc;
  }
}

extern "C" int nn_cuda_embedding_bwd(const int32_t *order,
                                     const int32_t *seg_start,
                                     const int32_t *seg_row, int segments,
                                     const float *dout, int C, float *dwte,
                                     void *stream) {
  if (segments == 0 || C == 0) return 0;
  const int threads = C < THREADS ? 32 * ((C + 31) / 32) : THREADS;
  k_embedding_bwd<<<segments, threads, 0, S(stream)>>>(order, seg_start,
                                                       seg_row, dout, C, dwte);
  LAUNCHED(k_embedding_bwd);
  return 0;
}

__global__ void k_position_bwd(const float *dx, int B, int T, int C,
                               float *dwpe) {
  GRID_STRIDE(k, (int64_t)T * C) {
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += dx[(int64_t)b * T * C + k];
    dwpe[k] = acc;
  }
}

extern "C" int nn_cuda_position_bwd(const float *dx, int B, int T, int C,
                                    float *dwpe, void *stream) {
  if ((int64_t)T * C == 0) return 0;
  k_position_bwd<<<grid_for((int64_t)T * C), THREADS, 0, S(stream)>>>(dx, B, T,
                                                                      C, dwpe);
  LAUNCHED(k_position_bwd);
  return 0;
}

// ------------------------------------------------------------ cross-entropy

static const int XENT_THREADS = 512;

// (max, sum of exp(z - max)) pairs combined: the sum rescaled to the larger
// max; an empty part (sum 0) contributes nothing.
__device__ void combine(float &m, double &s, float m2, double s2) {
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
__global__ void k_xent_stats(const float *logits, int64_t ld,
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

__global__ void k_xent_rescale(const float *row_max, const float *global_max,
                               double *pair, int64_t n) {
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

__global__ void k_xent_grad(float *logits, int64_t ld, const int32_t *targets,
                            int v0, int vl, const float *global_max,
                            const double *pair, float grad_scale,
                            double *row_loss) {
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
__global__ void k_sum_f64(const double *x, int64_t n, double *out) {
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
