// SPDX-License-Identifier: BSD-3-Clause
/*
 * GPT-2 for one TP rank on a GPU (built with --config=cuda only): the model
 * of gpt2.h, operation by operation, with cuBLAS for the matmuls (strict
 * FP32 by default; TF32 tensor cores on request) and the kernels of
 * examples/common/nn_cuda.h. Same parameter order, shapes, TP layout and
 * sequence parallelism as gpt2.h; parameters, gradients and activations
 * live in device memory.
 *
 * Everything is queued on the model's stream (m->stream, created here);
 * the host waits only where it must read a result (gpt2_cuda_loss). The
 * TP collectives are callbacks handed device pointers and that stream:
 * each must leave its result in place for the work queued on the stream
 * after it (e.g. tpdp_comm_order_after + tpdp_allreduce_async +
 * tpdp_work_wait_stream: no host synchronisation). grad_ready(i) is called
 * once parameter i's gradient is queued (not yet computed): a consumer
 * orders itself after the stream (the tpdp reducer does, through its
 * producer_stream).
 *
 * Plain C interface; functions return 0, or nonzero with the message in
 * nn_cuda_last_error() (a callback's failure: the callback's own report).
 */
#ifndef TPDP_EXAMPLES_TRAIN_GPT2_GPT2_CUDA_H
#define TPDP_EXAMPLES_TRAIN_GPT2_GPT2_CUDA_H

#include <stdint.h>

#include "examples/common/nn_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gpt2.h has no extern "C" of its own. */
#include "examples/train_gpt2/gpt2.h"

/* The TP collectives, on device memory, ordered on `stream`. */
typedef struct {
  void *ctx;
  /* in place over TP: n elements (f32, or f64 when f64), summed, or the
   * maximum when `max` */
  int (*allreduce)(void *ctx, void *buf, int64_t n, int f64, int max,
                   void *stream);
  /* sequence parallelism, as gpt2_ops's: [B, tl, C] -> [B, T, C], and the
   * partial [B, T, C] -> this rank's summed [B, tl, C] */
  int (*seq_gather)(void *ctx, const float *shard, float *full, void *stream);
  int (*seq_reduce_scatter)(void *ctx, const float *full, float *shard,
                            void *stream);
  /* parameter i's gradient is queued (DP may reduce it after the stream) */
  int (*grad_ready)(void *ctx, int i);
} gpt2_cuda_ops;

typedef struct {
  gpt2_dims d;
  int tp_rank, tp_size;
  float **P, **G;        /* [num_params] device pointers (the caller's) */
  void *stream;          /* cudaStream_t, owned */
  void *blas;            /* cuBLAS handle, owned */
  int64_t ldv;           /* the logits' row pitch (vl rounded up) */
  const int32_t *inputs; /* host, kept from the forward for the backward */
  float loss_scale;
  /* activations, as gpt2_model's (device) */
  float *x0, *resid, *resid2, *ln1, *ln2, *ln1_stats, *ln2_stats, *ln1g, *ln2g;
  float *qkv, *att, *atty, *fch, *fcg, *lnf, *lnf_stats, *lnfg, *logits;
  float *tmp, *tmp2, *dresid, *dfull, *dtmp, *dqkv, *datty, *dfc, *dscore;
  float *colsum_scratch;
  /* cross-entropy per row: this rank's max, the TP max, (sum, target
   * logit) pairs, losses; their sum */
  float *row_max, *row_gmax;
  double *pair, *row_loss, *loss_dev;
  /* device ids and the embedding backward's plan */
  int32_t *ids, *targets, *order, *seg_start, *seg_row;
  /* host (page-locked) staging of the same, and the loss */
  int32_t *h_ids, *h_order, *h_seg_start, *h_seg_row, *h_row_work;
  double *h_loss;
  void *uploaded; /* event: the staged ids / plan have been read */
  void *loss_ready;
} gpt2_cuda_model;

/* Buffers for d on the current GPU; P and G as gpt2_model_init's (device
 * pointers; G may be re-pointed between steps). tp_rank / tp_size: this
 * rank in the TP group (tp_rank 0 adds the position embedding before the
 * lookup's sum over TP). tf32: see nn_cuda_blas_create. On failure (a GPU
 * out of memory names the buffer and its size) everything is freed. */
int gpt2_cuda_model_init(gpt2_cuda_model *m, const gpt2_dims *d, float **P,
                         float **G, int tp_rank, int tp_size, int tf32);
void gpt2_cuda_model_free(gpt2_cuda_model *m);
/* Bytes of device memory gpt2_cuda_model_init allocates. */
int64_t gpt2_cuda_activation_bytes(const gpt2_dims *d);

/* Forward on host inputs/targets [B, T] (kept by pointer until the
 * backward); queued, and the loss sum's copy to the host with it. The
 * timers count host time (queueing), as gpt2_forward's. */
int gpt2_cuda_forward(gpt2_cuda_model *m, const int32_t *inputs,
                      const int32_t *targets, float loss_scale,
                      const gpt2_cuda_ops *ops, gpt2_timers *t);
/* The last forward's summed loss over its B*T positions (waits for it). */
int gpt2_cuda_loss(gpt2_cuda_model *m, double *loss_sum);
/* Backward after gpt2_cuda_forward: overwrites every G[i] (queued),
 * calling ops->grad_ready(i) in gpt2_backward's order. */
int gpt2_cuda_backward(gpt2_cuda_model *m, const gpt2_cuda_ops *ops,
                       gpt2_timers *t);

#ifdef __cplusplus
}
#endif
#endif
