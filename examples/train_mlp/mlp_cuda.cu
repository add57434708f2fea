// SPDX-License-Identifier: BSD-3-Clause
// The residual MLP of examples/train_mlp on a GPU: cuBLAS sgemm (strict
// FP32) plus small kernels, mirroring mlp.c operation by operation (same
// accumulation types: double where mlp.c uses double). See mlp_cuda.h.
//
// Row-major matrices through column-major cuBLAS: a row-major [r, c] buffer
// read as column-major is its [c, r] transpose, so a row-major product
// C = A B is computed as the column-major C^T = B^T A^T.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/common/nn_cuda/kernels.cuh"
#include "examples/train_mlp/mlp_cuda.h"

// ------------------------------------------------------------ kernels

// Softmax cross-entropy, one warp per row: row_loss[b] = lse - z[label];
// logits overwritten with (p - onehot) / scale.
static __global__ void k_softmax_ce(float *logits, const int *labels,
                                    double *row_loss, int B, int C,
                                    float scale) {
  int row = blockIdx.x * ROW_WARPS + threadIdx.x / 32;
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

// ------------------------------------------------------------ linear

static cudaStream_t stream_of(const mlp_cuda_model *m) {
  return (cudaStream_t)m->stream;
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
    NN_TRY(nn_cuda_sgemm(m->cublas, 1, 0, NO, B, NI, one, W, NI, X, NI, zero, Y,
                         NO));
  }
  if (bias) {
    NN_TRY(nn_cuda_bias_add(Y, bias, B, NO, m->stream));
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
      NN_TRY(nn_cuda_sgemm(m->cublas, 0, 1, NI, NO, B, one, X, NI, dY, NO, zero,
                           dW, NI));
    }
  }
  if (dbias && NO > 0) {
    NN_TRY(nn_cuda_colsum(dY, dbias, B, NO, m->colsum_scratch, m->stream));
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
  NN_TRY(nn_cuda_sgemm(m->cublas, 0, 0, NI, B, NO, one, W, NI, dY, NO, beta, dX,
                       NI));
  return 0;
}

// ------------------------------------------------------------ model

template <typename T>
static int dev_alloc(T **p, size_t count) {
  void *v = NULL;
  NN_TRY(nn_cuda_alloc(&v, count * sizeof(T), "the MLP's activations"));
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
  // The stream orders itself with the legacy default stream too, which the
  // synchronous copies elsewhere use; strict FP32 matmuls (tf32 = 0): no
  // TF32 rounding, so --check can hold 1e-4.
  int rc = nn_cuda_stream_create(&m->stream);
  if (!rc) rc = nn_cuda_blas_create(&m->cublas, m->stream, 0);
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
  // the widest sum over rows: LayerNorm's two over H, a bias over F or C
  size_t wide = 2 * H > F ? 2 * H : F;
  if (C > wide) wide = C;
  if (!rc)
    rc = dev_alloc(&m->colsum_scratch,
                   (size_t)nn_cuda_colsum_scratch_floats((int)B, (int)wide, 1));
  if (!rc) rc = dev_alloc(&m->row_loss, B);
  if (!rc) {
    m->host_loss = (double *)calloc(B + 1, sizeof(double));
    if (!m->host_loss) rc = nn_cuda_fail("out of host memory");
  }
  if (rc) mlp_cuda_model_free(m);  // frees keep the first error's message
  return rc;
}

extern "C" void mlp_cuda_model_free(mlp_cuda_model *m) {
  if (m->stream) cudaStreamSynchronize(stream_of(m));
  void *bufs[] = {m->x,  m->h,  m->y,      m->mean,     m->rstd,
                  m->a,  m->g,  m->tmp,    m->logits,   m->dh,
                  m->dy, m->da, m->labels, m->row_loss, m->colsum_scratch};
  for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
    nn_cuda_free(bufs[k]);
  free(m->host_loss);
  nn_cuda_blas_destroy(m->cublas);
  nn_cuda_stream_destroy(m->stream);
  memset(m, 0, sizeof *m);
}

// A caller's callback (cb may be NULL: nothing to call); a nonzero return
// fails the step with the message the arguments after `args` format.
#define CALLBACK(cb, args, ...)    \
  do {                             \
    if (cb) {                      \
      int rc_ = (cb)args;          \
      if (rc_ != 0) {              \
        nn_cuda_fail(__VA_ARGS__); \
        return rc_;                \
      }                            \
    }                              \
  } while (0)

#define TP_ALLREDUCE(kind, layer, buf, n)                               \
  CALLBACK(allreduce, ((kind), (layer), (buf), (n), m->stream, ar_ctx), \
           "TP allreduce (kind %d, layer %d) failed", (kind), (layer))
#define GRAD_READY(i)                    \
  CALLBACK(on_grad_ready, ((i), gr_ctx), \
           "gradient-ready callback for parameter %d failed", (i))
#define BLOCK_EVENT(event, layer)                         \
  CALLBACK(m->block_fn, ((event), (layer), m->block_ctx), \
           "block hook (event %d, layer %d) failed", (event), (layer))

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
  NN_TRY(linear_fwd(m, m->x, P[MLP_IN_W], P[MLP_IN_B], m->h, B, D, H));
  for (int l = 0; l < L; l++) {
    const float *hin = m->h + l * BH;
    float *hout = m->h + (l + 1) * BH;
    float *y = m->y + l * BH, *a = m->a + l * BF, *g = m->g + l * BF;
    BLOCK_EVENT(MLP_BLOCK_FORWARD_BEGIN, l);
    NN_TRY(nn_cuda_layernorm_fwd(
        hin, P[mlp_block_param(l, BLK_LN_G)], P[mlp_block_param(l, BLK_LN_B)],
        y, m->mean + l * B, m->rstd + l * B, B, H, 1e-5f, st));
    NN_TRY(linear_fwd(m, y, P[mlp_block_param(l, BLK_FC1_W)],
                      P[mlp_block_param(l, BLK_FC1_B)], a, B, H, F));
    NN_TRY(nn_cuda_gelu_fwd(a, g, BF, st));
    // rowwise: partial sums over this rank's slice of F, then allreduce
    NN_TRY(linear_fwd(m, g, P[mlp_block_param(l, BLK_FC2_W)], NULL, m->tmp, B,
                      F, H));
    TP_ALLREDUCE(MLP_TP_ROWWISE_OUT, l, m->tmp, BH);
    NN_TRY(nn_cuda_residual(hin, m->tmp, P[mlp_block_param(l, BLK_FC2_B)], hout,
                            B, H, st));
    BLOCK_EVENT(MLP_BLOCK_FORWARD_END, l);
  }
  NN_TRY(
      linear_fwd(m, m->h + L * BH, P[head], P[head + 1], m->logits, B, H, C));
  k_softmax_ce<<<grid_rows(B), 32 * ROW_WARPS, 0, st>>>(
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
  NN_TRY(linear_bwd_params(m, hL, m->logits, G[head], G[head + 1], B, H, C));
  GRAD_READY(head);
  GRAD_READY(head + 1);
  NN_TRY(linear_bwd_input(m, m->logits, P[head], m->dh, B, H, C, 0.0f));
  for (int l = L - 1; l >= 0; l--) {
    const float *hin = m->h + l * BH;
    float *y = m->y + l * BH, *a = m->a + l * BF, *g = m->g + l * BF;
    BLOCK_EVENT(MLP_BLOCK_BACKWARD_BEGIN, l);
    NN_TRY(linear_bwd_params(m, g, m->dh, G[mlp_block_param(l, BLK_FC2_W)],
                             G[mlp_block_param(l, BLK_FC2_B)], B, F, H));
    GRAD_READY(mlp_block_param(l, BLK_FC2_W));
    GRAD_READY(mlp_block_param(l, BLK_FC2_B));
    NN_TRY(linear_bwd_input(m, m->dh, P[mlp_block_param(l, BLK_FC2_W)], m->da,
                            B, F, H, 0.0f));
    NN_TRY(nn_cuda_gelu_bwd(a, m->da, BF, st));
    NN_TRY(linear_bwd_params(m, y, m->da, G[mlp_block_param(l, BLK_FC1_W)],
                             G[mlp_block_param(l, BLK_FC1_B)], B, H, F));
    GRAD_READY(mlp_block_param(l, BLK_FC1_W));
    GRAD_READY(mlp_block_param(l, BLK_FC1_B));
    // colwise input backward: dy is partial over TP ranks
    NN_TRY(linear_bwd_input(m, m->da, P[mlp_block_param(l, BLK_FC1_W)], m->dy,
                            B, H, F, 0.0f));
    TP_ALLREDUCE(MLP_TP_COLWISE_IN_GRAD, l, m->dy, BH);
    // dh accumulates the branch through the norm (residual keeps dh)
    NN_TRY(nn_cuda_layernorm_bwd(
        hin, P[mlp_block_param(l, BLK_LN_G)], m->mean + l * B, m->rstd + l * B,
        m->dy, m->dh, G[mlp_block_param(l, BLK_LN_G)],
        G[mlp_block_param(l, BLK_LN_B)], B, H, m->colsum_scratch, st));
    GRAD_READY(mlp_block_param(l, BLK_LN_G));
    GRAD_READY(mlp_block_param(l, BLK_LN_B));
    BLOCK_EVENT(MLP_BLOCK_BACKWARD_END, l);
  }
  NN_TRY(linear_bwd_params(m, m->x, m->dh, G[MLP_IN_W], G[MLP_IN_B], B, D, H));
  GRAD_READY(MLP_IN_W);
  GRAD_READY(MLP_IN_B);
  return 0;
}
