// SPDX-License-Identifier: BSD-3-Clause
/*
 * The residual MLP of examples/train_mlp on a GPU (built with --config=cuda
 * only): the same model step as mlp.c for one TP rank, with cuBLAS sgemm in
 * strict FP32 (CUBLAS_PEDANTIC_MATH: no TF32) and small CUDA kernels for
 * bias add, layernorm, GELU, softmax cross-entropy, column sums and
 * residual add (AdamW: nn_cuda_adamw). Same parameter order, shapes and semantics as mlp.h.
 *
 * Everything is queued on one CUDA stream (m->stream, created here). The
 * TP collectives are a callback handed a device pointer and the stream: it
 * must leave the sum in place, ordered on that stream (e.g.
 * tpdp_comm_order_after + tpdp_allreduce_async + tpdp_work_wait_stream).
 * on_grad_ready(i) is called once parameter i's gradient kernels are
 * queued on the stream (not yet finished): a consumer orders itself after
 * the stream (the tpdp reducer does, through producer_stream).
 *
 * Plain C interface (no CUDA types): callable from C11 code.
 * Functions return 0 on success and nonzero on failure, with the failing
 * call and CUDA's or cuBLAS's message in nn_cuda_last_error(); device
 * memory, copies and streams are examples/common/nn_cuda.h's.
 */
#ifndef TPDP_EXAMPLES_MLP_CUDA_H
#define TPDP_EXAMPLES_MLP_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* mlp.h has no extern "C" of its own: included here so that C++/CUDA
 * translation units link against mlp.c's C symbols. */
#include "examples/common/nn_cuda.h"
#include "examples/train_mlp/mlp.h"

/* One TP rank's model on the current GPU. Parameter and gradient pointers
 * are device pointers owned by the caller (param[i], grad[i], indexed as
 * in mlp.h); the caller may re-point grad[i] between steps. */
typedef struct {
  mlp_shape s;
  int f_local;
  int batch;
  float **param; /* [num_params] device pointers */
  float **grad;  /* [num_params] device pointers */
  void *stream;  /* cudaStream_t, owned */
  void *cublas;  /* cublasHandle_t, owned */
  /* device activations, as mlp_model's */
  float *x, *h, *y, *mean, *rstd, *a, *g, *tmp, *logits, *dh, *dy, *da;
  float *colsum_scratch; /* nn_cuda's sums over rows */
  int *labels;
  double *row_loss;  /* [batch] */
  double *host_loss; /* [batch], host */
  /* Called around each block's forward and backward as in mlp.h (the
   * fully sharded units' hooks, which may re-point param[] and grad[]:
   * the pointers are read after it returns). NULL: none. Set after
   * mlp_cuda_model_init. */
  mlp_block_fn block_fn;
  void *block_ctx;
} mlp_cuda_model;

/* TP collective callback: in-place sum over the TP group of n floats at
 * device pointer `data`, ordered on `stream`. 0 on success. */
typedef int (*mlp_cuda_allreduce_fn)(int kind, int layer, float *data,
                                     int64_t n, void *stream, void *ctx);

int mlp_cuda_model_init(mlp_cuda_model *m, const mlp_shape *s, int f_local,
                        int batch, float **param, float **grad);
void mlp_cuda_model_free(mlp_cuda_model *m);

/* Forward on host x [batch, d_in] and host labels (copied to the device);
 * *loss_sum (host) receives the sum of the per-sample losses (this waits
 * for the stream). dlogits / loss_scale stay on the device for backward.
 * allreduce may be NULL (a single TP rank). */
int mlp_cuda_forward(mlp_cuda_model *m, const float *x, const int *labels,
                     float loss_scale, mlp_cuda_allreduce_fn allreduce,
                     void *ar_ctx, double *loss_sum);

/* Backward after mlp_cuda_forward: gradients overwrite m->grad[i] (queued
 * on m->stream); on_grad_ready(i) as in mlp_backward (reverse order). */
int mlp_cuda_backward(mlp_cuda_model *m, mlp_cuda_allreduce_fn allreduce,
                      void *ar_ctx, mlp_grad_ready_fn on_grad_ready,
                      void *gr_ctx);

#ifdef __cplusplus
}
#endif
#endif
