// The residual MLP of examples/train_mlp on a GPU: cuBLAS sgemm (strict
// FP32) plus small kernels, mirroring mlp.c operation by operation (same
// accumulation types: double where mlp.c uses double). See mlp_cuda.h.
//
// Row-major matrices through column-major cuBLAS: a row-major [r, c] buffer
// read as column-major is its [c, r] transpose, so a row-major product
// C = A B is computed as the column-major C^T = B^T A^T.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/train_mlp/mlp_cuda.h"

// ------------------------------------------------------------ errors

static thread_local char g_err[512];

static int set_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_err, sizeof g_err, fmt, ap);
  va_end(ap);
  return 1;
}

extern "C" const char *mlp_cuda_last_error(void) { return g_err; }

#define CUDA_TRY(call)                                             \
  do {                                                             \
    cudaError_t e_ = (call);                                       \
    if (e_ != cudaSuccess)                                         \
      return set_err("%s: %s (%s)", #call, cudaGetErrorString(e_), \
                     cudaGetErrorName(e_));                        \
  } while (0)

#define CUBLAS_TRY(call)                                          \
  do {                                                            \
    cublasStatus_t s_ = (call);                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS)                              \
      return set_err("%s: %s", #call, cublasGetStatusString(s_)); \
  } while (0)

// A kernel launch: launch errors now, execution errors at the next sync.
#define LAUNCHED(name) CUDA_TRY(cudaGetLastError())

#define TRY(call)             \
  do {                        \
    int rc_ = (call);         \
    if (rc_ != 0) return rc_; \
  } while (0)

// ------------------------------------------------------------ helpers

extern "C" int mlp_cuda_device_count(int *count) {
  *count = 0;
  CUDA_TRY(cudaGetDeviceCount(count));
  return 0;
}

extern "C" int mlp_cuda_use_device(int device, char *name, size_t len) {
  CUDA_TRY(cudaSetDevice(device));
  cudaDeviceProp prop;
  CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  if (name && len > 0) snprintf(name, len, "%s", prop.name);
  return 0;
}

extern "C" int mlp_cuda_current_device(int *device) {
  CUDA_TRY(cudaGetDevice(device));
  return 0;
}

extern "C" int mlp_cuda_alloc(void **ptr, size_t bytes) {
  *ptr = NULL;
  // +4: a valid, distinct pointer even for an empty shard.
  CUDA_TRY(cudaMalloc(ptr, bytes + 4));
  cudaError_t e = cudaMemset(*ptr, 0, bytes + 4);
  if (e != cudaSuccess) {
    cudaFree(*ptr);
    *ptr = NULL;
    return set_err("cudaMemset(%zu bytes): %s", bytes + 4,
                   cudaGetErrorString(e));
  }
  return 0;
}

extern "C" void mlp_cuda_free(void *ptr) {
  if (ptr) cudaFree(ptr);
}

extern "C" int mlp_cuda_to_device(void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return 0;
  CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  return 0;
}

extern "C" int mlp_cuda_to_host(void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return 0;
  CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  return 0;
}

extern "C" int mlp_cuda_stream_wait(void *waiter, void *producer) {
  if (waiter == producer) return 0;
  cudaEvent_t ev;
  CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaError_t e = cudaEventRecord(ev, (cudaStream_t)producer);
  if (e == cudaSuccess) e = cudaStreamWaitEvent((cudaStream_t)waiter, ev, 0);
  cudaEventDestroy(ev);  // released once the wait has been satisfied
  if (e != cudaSuccess)
    return set_err("cudaEventRecord/cudaStreamWaitEvent: %s",
                   cudaGetErrorString(e));
  return 0;
}

extern "C" int mlp_cuda_stream_sync(void *stream) {
  CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
  return 0;
}

// ------------------------------------------------------------ kernels

static const int THREADS = 256;
static const int WARPS_PER_BLOCK = 4;  // warp-per-row kernels: 128 threads

static unsigned grid_for(int64_t n) {
  int64_t g = (n + THREADS - 1) / THREADS;
  if (g < 1) g = 1;
  if (g > 65535) g = 65535;  // the kernels loop over the rest
  return (unsigned)g;
}

static unsigned grid_rows(int rows) {
  int g = (rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
  return (unsigned)(g < 1 ? 1 : g);
}

#define GRID_STRIDE(k, n)                                                   \
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < (n); \
       k += (int64_t)gridDim.x * blockDim.x)

__device__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Y[b, o] += bias[o]
__global__ void k_bias_add(float *Y, const float *bias, int B, int NO) {
  GRID_STRIDE(k, (int64_t)B * NO) Y[k] += bias[k % NO];
}

// out[o] = sum_b X[b, o], in b order (as mlp.c).
__global__ void k_colsum(const float *X, float *out, int B, int NO) {
  GRID_STRIDE(o, (int64_t)NO) {
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += X[(int64_t)b * NO + o];
    out[o] = acc;
  }
}

__global__ void k_layernorm_fwd(const float *X, const float *g,
                                const float *bta, float *Y, float *mean,
                                float *rstd, int B, int H) {
  int row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= B) return;  // uniform over the warp
  const float *x = X + (int64_t)row * H;
  double mu = 0;
  for (int k = lane; k < H; k += 32) mu += x[k];
  mu = warp_sum(mu) / H;
  double var = 0;
  for (int k = lane; k < H; k += 32) var += (x[k] - mu) * (x[k] - mu);
  var = warp_sum(var) / H;
  float r = (float)(1.0 / sqrt(var + (double)1e-5f));
  if (lane == 0) {
    mean[row] = (float)mu;
    rstd[row] = r;
  }
  for (int k = lane; k < H; k += 32)
    Y[(int64_t)row * H + k] = (x[k] - (float)mu) * r * g[k] + bta[k];
}

// dX (added into), one warp per row.
__global__ void k_layernorm_bwd_x(const float *X, const float *g,
                                  const float *mean, const float *rstd,
                                  const float *dY, float *dX, int B, int H) {
  int row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= B) return;
  const float *x = X + (int64_t)row * H, *dy = dY + (int64_t)row * H;
  float mu = mean[row], r = rstd[row];
  double s1 = 0, s2 = 0;
  for (int k = lane; k < H; k += 32) {
    float xhat = (x[k] - mu) * r;
    float dxhat = dy[k] * g[k];
    s1 += dxhat;
    s2 += dxhat * xhat;
  }
  s1 = warp_sum(s1);
  s2 = warp_sum(s2);
  float m1 = (float)(s1 / H), m2 = (float)(s2 / H);
  for (int k = lane; k < H; k += 32) {
    float xhat = (x[k] - mu) * r;
    dX[(int64_t)row * H + k] += r * (dy[k] * g[k] - m1 - xhat * m2);
  }
}

// dg[k] = sum_b dY * xhat, db[k] = sum_b dY (overwritten), in b order.
__global__ void k_layernorm_bwd_params(const float *X, const float *mean,
                                       const float *rstd, const float *dY,
                                       float *dg, float *db, int B, int H) {
  GRID_STRIDE(k, (int64_t)H) {
    float sg = 0.0f, sb = 0.0f;
    for (int b = 0; b < B; b++) {
      int64_t i = (int64_t)b * H + k;
      float xhat = (X[i] - mean[b]) * rstd[b];
      sg += dY[i] * xhat;
      sb += dY[i];
    }
    dg[k] = sg;
    db[k] = sb;
  }
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

__global__ void k_gelu_fwd(const float *a, float *g, int64_t n) {
  GRID_STRIDE(k, n) {
    float x = a[k];
    g[k] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
  }
}

__global__ void k_gelu_bwd(const float *a, float *dg, int64_t n) {
  GRID_STRIDE(k, n) {
    float x = a[k];
    float t = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    float d = 0.5f * (1.0f + t) +
              0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 0.134145f * x * x);
    dg[k] *= d;
  }
}

// hout = hin + tmp + b2 (b2 per column)
__global__ void k_residual(const float *hin, const float *tmp, const float *b2,
                           float *hout, int B, int H) {
  GRID_STRIDE(k, (int64_t)B * H) hout[k] = hin[k] + tmp[k] + b2[k % H];
}

// Softmax cross-entropy, one warp per row: row_loss[b] = lse - z[label];
// logits overwritten with (p - onehot) / scale.
__global__ void k_softmax_ce(float *logits, const int *labels, double *row_loss,
                             int B, int C, float scale) {
  int row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= B) return;
  float *z = logits + (int64_t)row * C;
  int label = labels[row];
  float mx = -INFINITY;
  for (int c = lane; c < C; c += 32) mx = fmaxf(mx, z[c]);
  mx = warp_max(mx);
  double sum = 0;
  for (int c = lane; c < C; c += 32) sum += exp((double)(z[c] - mx));
  sum = warp_sum(sum);
  double lse = log(sum) + mx;
  if (lane == 0) row_loss[row] = lse - z[label];
  __syncwarp();  // z[label] is read before any lane overwrites it
  for (int c = lane; c < C; c += 32) {
    double p = exp((double)z[c] - lse);
    z[c] = (float)((p - (c == label ? 1.0 : 0.0)) / scale);
  }
}

__global__ void k_adamw(float *p, const float *g, float *m, float *v, int64_t n,
                        float lr, float c1, float c2) {
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  GRID_STRIDE(k, n) {
    float gk = g[k];
    float mk = b1 * m[k] + (1 - b1) * gk;
    float vk = b2 * v[k] + (1 - b2) * gk * gk;
    m[k] = mk;
    v[k] = vk;
    float mhat = mk / c1, vhat = vk / c2;
    p[k] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[k]);
  }
}

// ------------------------------------------------------------ linear

static cudaStream_t stream_of(const mlp_cuda_model *m) {
  return (cudaStream_t)m->stream;
}

static cublasHandle_t blas_of(const mlp_cuda_model *m) {
  return (cublasHandle_t)m->cublas;
}

// Y[B,NO] = X[B,NI] W[NO,NI]^T + bias[NO] (bias may be NULL).
static int linear_fwd(mlp_cuda_model *m, const float *X, const float *W,
                      const float *bias, float *Y, int B, int NI, int NO) {
  if (NO == 0 || B == 0) return 0;
  if (NI == 0) {
    CUDA_TRY(cudaMemsetAsync(Y, 0, sizeof(float) * (size_t)B * (size_t)NO,
                             stream_of(m)));
  } else {
    const float one = 1.0f, zero = 0.0f;
    // column-major Y^T[NO,B] = W[NO,NI] X^T[NI,B]
    CUBLAS_TRY(cublasSgemm(blas_of(m), CUBLAS_OP_T, CUBLAS_OP_N, NO, B, NI,
                           &one, W, NI, X, NI, &zero, Y, NO));
  }
  if (bias) {
    k_bias_add<<<grid_for((int64_t)B * NO), THREADS, 0, stream_of(m)>>>(Y, bias,
                                                                        B, NO);
    LAUNCHED(k_bias_add);
  }
  return 0;
}

// dW[NO,NI] = dY^T X, dbias[NO] = sum_b dY (either may be NULL).
static int linear_bwd_params(mlp_cuda_model *m, const float *X, const float *dY,
                             float *dW, float *dbias, int B, int NI, int NO) {
  if (dW && (int64_t)NO * NI > 0) {
    if (B == 0) {
      CUDA_TRY(cudaMemsetAsync(dW, 0, sizeof(float) * (size_t)NO * (size_t)NI,
                               stream_of(m)));
    } else {
      const float one = 1.0f, zero = 0.0f;
      // column-major dW^T[NI,NO] = X^T[NI,B] dY[B,NO]
      CUBLAS_TRY(cublasSgemm(blas_of(m), CUBLAS_OP_N, CUBLAS_OP_T, NI, NO, B,
                             &one, X, NI, dY, NO, &zero, dW, NI));
    }
  }
  if (dbias && NO > 0) {
    k_colsum<<<grid_for(NO), THREADS, 0, stream_of(m)>>>(dY, dbias, B, NO);
    LAUNCHED(k_colsum);
  }
  return 0;
}

// dX[B,NI] = dY[B,NO] W[NO,NI] + beta dX.
static int linear_bwd_input(mlp_cuda_model *m, const float *dY, const float *W,
                            float *dX, int B, int NI, int NO, float beta) {
  if ((int64_t)B * NI == 0) return 0;
  if (NO == 0) {
    if (beta == 0.0f)
      CUDA_TRY(cudaMemsetAsync(dX, 0, sizeof(float) * (size_t)B * (size_t)NI,
                               stream_of(m)));
    return 0;
  }
  const float one = 1.0f;
  // column-major dX^T[NI,B] = W^T[NI,NO] dY^T[NO,B]
  CUBLAS_TRY(cublasSgemm(blas_of(m), CUBLAS_OP_N, CUBLAS_OP_N, NI, B, NO, &one,
                         W, NI, dY, NO, &beta, dX, NI));
  return 0;
}

// ------------------------------------------------------------ model

template <typename T>
static int dev_alloc(T **p, size_t count) {
  void *v = NULL;
  TRY(mlp_cuda_alloc(&v, count * sizeof(T)));
  *p = (T *)v;
  return 0;
}

extern "C" int mlp_cuda_model_init(mlp_cuda_model *m, const mlp_shape *s,
                                   int f_local, int batch, float **param,
                                   float **grad) {
  memset(m, 0, sizeof *m);
  m->s = *s;
  m->f_local = f_local;
  m->batch = batch;
  m->param = param;
  m->grad = grad;
  size_t B = (size_t)batch, H = (size_t)s->hidden, L = (size_t)s->layers;
  size_t F = (size_t)f_local, C = (size_t)s->classes;
  cudaStream_t stream = NULL;
  // Default flags: the stream also orders itself with the legacy default
  // stream, which plain cudaMemcpy/cudaMemset elsewhere use.
  cudaError_t e = cudaStreamCreate(&stream);
  if (e != cudaSuccess) {
    mlp_cuda_model_free(m);
    return set_err("cudaStreamCreate: %s", cudaGetErrorString(e));
  }
  m->stream = stream;
  cublasHandle_t h = NULL;
  cublasStatus_t bs = cublasCreate(&h);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    mlp_cuda_model_free(m);
    return set_err("cublasCreate: %s", cublasGetStatusString(bs));
  }
  m->cublas = h;
  bs = cublasSetStream(h, stream);
  // Strict FP32: no TF32 tensor-core rounding (so --check can hold 1e-4).
  if (bs == CUBLAS_STATUS_SUCCESS)
    bs = cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    mlp_cuda_model_free(m);
    return set_err("cublasSetStream/cublasSetMathMode: %s",
                   cublasGetStatusString(bs));
  }
  int rc = 0;
  if (!rc) rc = dev_alloc(&m->x, B * (size_t)s->d_in);
  if (!rc) rc = dev_alloc(&m->h, (L + 1) * B * H);
  if (!rc) rc = dev_alloc(&m->y, L * B * H);
  if (!rc) rc = dev_alloc(&m->mean, L * B);
  if (!rc) rc = dev_alloc(&m->rstd, L * B);
  if (!rc) rc = dev_alloc(&m->a, L * B * F);
  if (!rc) rc = dev_alloc(&m->g, L * B * F);
  if (!rc) rc = dev_alloc(&m->tmp, B * H);
  if (!rc) rc = dev_alloc(&m->logits, B * C);
  if (!rc) rc = dev_alloc(&m->dh, B * H);
  if (!rc) rc = dev_alloc(&m->dy, B * H);
  if (!rc) rc = dev_alloc(&m->da, B * F);
  if (!rc) rc = dev_alloc(&m->labels, B);
  if (!rc) rc = dev_alloc(&m->row_loss, B);
  if (!rc) {
    m->host_loss = (double *)calloc(B + 1, sizeof(double));
    if (!m->host_loss) rc = set_err("out of host memory");
  }
  if (rc) {
    // keep the first error's message
    char saved[sizeof g_err];
    memcpy(saved, g_err, sizeof saved);
    mlp_cuda_model_free(m);
    memcpy(g_err, saved, sizeof saved);
  }
  return rc;
}

extern "C" void mlp_cuda_model_free(mlp_cuda_model *m) {
  if (m->stream) cudaStreamSynchronize(stream_of(m));
  void *bufs[] = {m->x,  m->h,  m->y,      m->mean,    m->rstd,
                  m->a,  m->g,  m->tmp,    m->logits,  m->dh,
                  m->dy, m->da, m->labels, m->row_loss};
  for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
    mlp_cuda_free(bufs[k]);
  free(m->host_loss);
  if (m->cublas) cublasDestroy(blas_of(m));
  if (m->stream) cudaStreamDestroy(stream_of(m));
  memset(m, 0, sizeof *m);
}

#define TP_ALLREDUCE(kind, layer, buf, n)                                    \
  do {                                                                       \
    if (allreduce) {                                                         \
      int rc_ = allreduce((kind), (layer), (buf), (n), m->stream, ar_ctx);   \
      if (rc_ != 0) {                                                        \
        set_err("TP allreduce (kind %d, layer %d) failed", (kind), (layer)); \
        return rc_;                                                          \
      }                                                                      \
    }                                                                        \
  } while (0)

#define GRAD_READY(i)                                                    \
  do {                                                                   \
    if (on_grad_ready) {                                                 \
      int rc_ = on_grad_ready((i), gr_ctx);                              \
      if (rc_ != 0) {                                                    \
        set_err("gradient-ready callback for parameter %d failed", (i)); \
        return rc_;                                                      \
      }                                                                  \
    }                                                                    \
  } while (0)

extern "C" int mlp_cuda_forward(mlp_cuda_model *m, const float *x,
                                const int *labels, float loss_scale,
                                mlp_cuda_allreduce_fn allreduce, void *ar_ctx,
                                double *loss_sum) {
  const mlp_shape *s = &m->s;
  int B = m->batch, H = s->hidden, D = s->d_in, C = s->classes;
  int F = m->f_local, L = s->layers, head = mlp_head_param(s);
  float **P = m->param;
  cudaStream_t st = stream_of(m);
  int64_t BH = (int64_t)B * H, BF = (int64_t)B * F;
  CUDA_TRY(cudaMemcpyAsync(m->x, x, sizeof(float) * (size_t)B * (size_t)D,
                           cudaMemcpyHostToDevice, st));
  CUDA_TRY(cudaMemcpyAsync(m->labels, labels, sizeof(int) * (size_t)B,
                           cudaMemcpyHostToDevice, st));
  TRY(linear_fwd(m, m->x, P[MLP_IN_W], P[MLP_IN_B], m->h, B, D, H));
  for (int l = 0; l < L; l++) {
    const float *hin = m->h + l * BH;
    float *hout = m->h + (l + 1) * BH;
    float *y = m->y + l * BH, *a = m->a + l * BF, *g = m->g + l * BF;
    k_layernorm_fwd<<<grid_rows(B), 32 * WARPS_PER_BLOCK, 0, st>>>(
        hin, P[mlp_block_param(l, BLK_LN_G)], P[mlp_block_param(l, BLK_LN_B)],
        y, m->mean + l * B, m->rstd + l * B, B, H);
    LAUNCHED(k_layernorm_fwd);
    TRY(linear_fwd(m, y, P[mlp_block_param(l, BLK_FC1_W)],
                   P[mlp_block_param(l, BLK_FC1_B)], a, B, H, F));
    if (BF > 0) {
      k_gelu_fwd<<<grid_for(BF), THREADS, 0, st>>>(a, g, BF);
      LAUNCHED(k_gelu_fwd);
    }
    // rowwise: partial sums over this rank's slice of F, then allreduce
    TRY(linear_fwd(m, g, P[mlp_block_param(l, BLK_FC2_W)], NULL, m->tmp, B, F,
                   H));
    TP_ALLREDUCE(MLP_TP_ROWWISE_OUT, l, m->tmp, BH);
    k_residual<<<grid_for(BH), THREADS, 0, st>>>(
        hin, m->tmp, P[mlp_block_param(l, BLK_FC2_B)], hout, B, H);
    LAUNCHED(k_residual);
  }
  TRY(linear_fwd(m, m->h + L * BH, P[head], P[head + 1], m->logits, B, H, C));
  k_softmax_ce<<<grid_rows(B), 32 * WARPS_PER_BLOCK, 0, st>>>(
      m->logits, m->labels, m->row_loss, B, C, loss_scale);
  LAUNCHED(k_softmax_ce);
  CUDA_TRY(cudaMemcpyAsync(m->host_loss, m->row_loss,
                           sizeof(double) * (size_t)B, cudaMemcpyDeviceToHost,
                           st));
  CUDA_TRY(cudaStreamSynchronize(st));
  double total = 0;
  for (int b = 0; b < B; b++) total += m->host_loss[b];
  *loss_sum = total;
  return 0;
}

extern "C" int mlp_cuda_backward(mlp_cuda_model *m,
                                 mlp_cuda_allreduce_fn allreduce, void *ar_ctx,
                                 mlp_grad_ready_fn on_grad_ready,
                                 void *gr_ctx) {
  const mlp_shape *s = &m->s;
  int B = m->batch, H = s->hidden, D = s->d_in, C = s->classes;
  int F = m->f_local, L = s->layers, head = mlp_head_param(s);
  float **P = m->param, **G = m->grad;
  cudaStream_t st = stream_of(m);
  int64_t BH = (int64_t)B * H, BF = (int64_t)B * F;
  const float *hL = m->h + L * BH;
  // m->logits holds dlogits since the forward
  TRY(linear_bwd_params(m, hL, m->logits, G[head], G[head + 1], B, H, C));
  GRAD_READY(head);
  GRAD_READY(head + 1);
  TRY(linear_bwd_input(m, m->logits, P[head], m->dh, B, H, C, 0.0f));
  for (int l = L - 1; l >= 0; l--) {
    const float *hin = m->h + l * BH;
    float *y = m->y + l * BH, *a = m->a + l * BF, *g = m->g + l * BF;
    TRY(linear_bwd_params(m, g, m->dh, G[mlp_block_param(l, BLK_FC2_W)],
                          G[mlp_block_param(l, BLK_FC2_B)], B, F, H));
    GRAD_READY(mlp_block_param(l, BLK_FC2_W));
    GRAD_READY(mlp_block_param(l, BLK_FC2_B));
    TRY(linear_bwd_input(m, m->dh, P[mlp_block_param(l, BLK_FC2_W)], m->da, B,
                         F, H, 0.0f));
    if (BF > 0) {
      k_gelu_bwd<<<grid_for(BF), THREADS, 0, st>>>(a, m->da, BF);
      LAUNCHED(k_gelu_bwd);
    }
    TRY(linear_bwd_params(m, y, m->da, G[mlp_block_param(l, BLK_FC1_W)],
                          G[mlp_block_param(l, BLK_FC1_B)], B, H, F));
    GRAD_READY(mlp_block_param(l, BLK_FC1_W));
    GRAD_READY(mlp_block_param(l, BLK_FC1_B));
    // colwise input backward: dy is partial over TP ranks
    TRY(linear_bwd_input(m, m->da, P[mlp_block_param(l, BLK_FC1_W)], m->dy, B,
                         H, F, 0.0f));
    TP_ALLREDUCE(MLP_TP_COLWISE_IN_GRAD, l, m->dy, BH);
    // dh accumulates the branch through the norm (residual keeps dh)
    k_layernorm_bwd_params<<<grid_for(H), THREADS, 0, st>>>(
        hin, m->mean + l * B, m->rstd + l * B, m->dy,
        G[mlp_block_param(l, BLK_LN_G)], G[mlp_block_param(l, BLK_LN_B)], B, H);
    LAUNCHED(k_layernorm_bwd_params);
    k_layernorm_bwd_x<<<grid_rows(B), 32 * WARPS_PER_BLOCK, 0, st>>>(
        hin, P[mlp_block_param(l, BLK_LN_G)], m->mean + l * B, m->rstd + l * B,
        m->dy, m->dh, B, H);
    LAUNCHED(k_layernorm_bwd_x);
    GRAD_READY(mlp_block_param(l, BLK_LN_G));
    GRAD_READY(mlp_block_param(l, BLK_LN_B));
  }
  TRY(linear_bwd_params(m, m->x, m->dh, G[MLP_IN_W], G[MLP_IN_B], B, D, H));
  GRAD_READY(MLP_IN_W);
  GRAD_READY(MLP_IN_B);
  return 0;
}

extern "C" int mlp_cuda_adamw(float *p, const float *g, float *m, float *v,
                              int64_t n, float lr, int step, void *stream) {
  if (n <= 0) return 0;
  // bias corrections computed on the host exactly as adamw_update does
  float c1 = 1.0f - powf(0.9f, (float)step),
        c2 = 1.0f - powf(0.999f, (float)step);
  k_adamw<<<grid_for(n), THREADS, 0, (cudaStream_t)stream>>>(p, g, m, v, n, lr,
                                                             c1, c2);
  LAUNCHED(k_adamw);
  return 0;
}
