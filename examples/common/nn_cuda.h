// SPDX-License-Identifier: BSD-3-Clause
/*
 * GPU kernels and device helpers for the example models (built with
 * --config=cuda only), the device counterparts of nn_cpu.h: LayerNorm,
 * tanh-GELU, bias and residual adds, column sums, AdamW with PyTorch's
 * semantics, causal softmax and its backward, the vocabulary-parallel
 * embedding and cross-entropy. Row-major f32, like nn_cpu.h.
 *
 * Plain C interface (no CUDA types, callable from C11): a stream is a
 * cudaStream_t passed as void * (NULL: the legacy default stream), every
 * kernel is queued on it and nothing waits unless stated. Functions return
 * 0, or nonzero with the failing call and CUDA's message in
 * nn_cuda_last_error() (thread-local).
 *
 * Sums over rows (column sums, LayerNorm's parameter gradients, the
 * embedding's backward) are deterministic: fixed partial sums in a fixed
 * order, no atomics, so two runs give the same bits.
 *
 * One op per file under nn_cuda/ (as llm.c's llmc/): device.cu (errors,
 * devices, memory, streams, events), blas.cu, colsum.cu, layernorm.cu,
 * elementwise.cu (bias, residual, GELU), adamw.cu, attention.cu (causal
 * softmax), embedding.cu, cross_entropy.cu; kernels.cuh and colsum.cuh
 * hold what they share.
 */
#ifndef TPDP_EXAMPLES_COMMON_NN_CUDA_H
#define TPDP_EXAMPLES_COMMON_NN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "examples/common/adamw.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Inside a function returning int: return the nonzero result of `call`
 * (an nn_cuda function, or a model's built on them), whose message is in
 * nn_cuda_last_error(). */
#define NN_TRY(call)          \
  do {                        \
    int rc_ = (call);         \
    if (rc_ != 0) return rc_; \
  } while (0)

/* The message of the last failure on this thread ("" if none). */
const char *nn_cuda_last_error(void);
/* Records a failure's message (printf format) for nn_cuda_last_error and
 * returns 1: the models built on these kernels report through it too. */
int nn_cuda_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---------------------------------------------------------- device */

/* Number of CUDA devices (0 and an error without a driver or a GPU). */
int nn_cuda_device_count(int *count);
/* Make `device` current; its name into `name` (always NUL-terminated). */
int nn_cuda_use_device(int device, char *name, size_t len);

/* Zero-filled device memory. `what` names the buffer in the error: a GPU
 * out of memory reads "out of GPU memory allocating 2.42 GiB for <what> on
 * cuda:0 (1.10 GiB free of 79.19 GiB)". 0 bytes gives a valid, distinct
 * pointer. */
int nn_cuda_alloc(void **ptr, size_t bytes, const char *what);
void nn_cuda_free(void *ptr); /* NULL: no-op */
/* Page-locked host memory (for asynchronous copies), zero-filled. */
int nn_cuda_alloc_host(void **ptr, size_t bytes, const char *what);
void nn_cuda_free_host(void *ptr);

/* Synchronous copies (legacy default stream). */
int nn_cuda_to_device(void *dst, const void *src, size_t bytes);
int nn_cuda_to_host(void *dst, const void *src, size_t bytes);
/* Copies queued on `stream` (host memory page-locked for overlap). */
int nn_cuda_copy_async(void *dst, const void *src, size_t bytes, void *stream);
/* `height` rows of `width` bytes: row r from src + r * spitch to
 * dst + r * dpitch (any memory kinds), queued on `stream`. */
int nn_cuda_copy_2d_async(void *dst, size_t dpitch, const void *src,
                          size_t spitch, size_t width, size_t height,
                          void *stream);
int nn_cuda_zero_async(void *dst, size_t bytes, void *stream);

/* Streams and events. */
int nn_cuda_stream_create(void **stream);
void nn_cuda_stream_destroy(void *stream);
/* `waiter` waits on the GPU for what is queued on `producer` so far. */
int nn_cuda_stream_wait(void *waiter, void *producer);
/* The host waits until `stream` is idle. */
int nn_cuda_stream_sync(void *stream);
int nn_cuda_event_create(void **event);
void nn_cuda_event_destroy(void *event);
int nn_cuda_event_record(void *event, void *stream);
int nn_cuda_event_sync(void *event);
/* Milliseconds between two recorded events (both complete). */
int nn_cuda_event_elapsed(void *start, void *end, float *ms);

/* ---------------------------------------------------------- cuBLAS */

/* A cuBLAS handle queuing on `stream`. tf32 = 0: strict FP32
 * (CUBLAS_PEDANTIC_MATH, no TF32 rounding: results within float rounding
 * of the CPU's sgemm); 1: TF32 tensor cores (CUBLAS_TF32_TENSOR_OP_MATH,
 * as PyTorch's allow_tf32 and llm.c on sm80 and newer). */
int nn_cuda_blas_create(void **handle, void *stream, int tf32);
void nn_cuda_blas_destroy(void *handle);

/* Column-major C = alpha op(A) op(B) + beta C, as cublasSgemm (ta, tb: 1
 * transposes). Row-major callers pass their operands in reverse order:
 * a row-major [r, c] buffer read column-major is its [c, r] transpose.
 * Empty products are handled (k = 0 scales C by beta). */
int nn_cuda_sgemm(void *blas, int ta, int tb, int m, int n, int k, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta,
                  float *C, int ldc);
/* The same over `batch` products, operand i at A + i * sa, ... */
int nn_cuda_sgemm_batched(void *blas, int ta, int tb, int m, int n, int k,
                          float alpha, const float *A, int lda, int64_t sa,
                          const float *B, int ldb, int64_t sb, float beta,
                          float *C, int ldc, int64_t sc, int batch);

/* ---------------------------------------------------------- kernels */

/* Y[N, C] row-wise LayerNorm of X with weight g and bias b (eps), biased
 * variance (torch), statistics accumulated in double as nn_layernorm_fwd;
 * mean[N] and rstd[N] kept for the backward. */
int nn_cuda_layernorm_fwd(const float *X, const float *g, const float *b,
                          float *Y, float *mean, float *rstd, int N, int C,
                          float eps, void *stream);
/* dX += the input gradient; dg and db overwritten (sums over the N rows).
 * scratch: nn_cuda_colsum_scratch_floats(N, C, 2) floats of device memory. */
int nn_cuda_layernorm_bwd(const float *X, const float *g, const float *mean,
                          const float *rstd, const float *dY, float *dX,
                          float *dg, float *db, int N, int C, float *scratch,
                          void *stream);

/* Y[N, C] += b[C] (each row). */
int nn_cuda_bias_add(float *Y, const float *b, int64_t N, int C, void *stream);
/* out[N, C] = a + r + b[C] (the residual add after a projection). */
int nn_cuda_residual(const float *a, const float *r, const float *b, float *out,
                     int64_t N, int C, void *stream);
/* out[C] = column sums of X[N, C] (overwritten). scratch: as above with
 * `sums` 1. */
int nn_cuda_colsum(const float *X, float *out, int N, int C, float *scratch,
                   void *stream);
/* Floats of scratch the row sums above need (`sums` sums per column). */
int64_t nn_cuda_colsum_scratch_floats(int N, int C, int sums);

/* GELU, tanh approximation (torch approximate="tanh"): y = gelu(x). */
int nn_cuda_gelu_fwd(const float *x, float *y, int64_t n, void *stream);
/* d <- d * gelu'(x), in place. */
int nn_cuda_gelu_bwd(const float *x, float *d, int64_t n, void *stream);

/* torch.optim.AdamW's step on n elements (step counts from 1), as
 * nn_adamw: the same scalars and per-element update (adamw.h), so the
 * same bits. */
int nn_cuda_adamw(float *p, const float *g, float *m, float *v, int64_t n,
                  const nn_adamw_opts *o, double weight_decay, int step,
                  void *stream);

/* Causal softmax in place over `rows` rows of T (row i is query position
 * i % T): entries above the diagonal become 0. */
int nn_cuda_causal_softmax_fwd(float *S, int64_t rows, int T, void *stream);
/* dS = P * (dP - sum(P * dP)) in place of dP, 0 above the diagonal. */
int nn_cuda_causal_softmax_bwd(const float *P, float *dP, int64_t rows, int T,
                               void *stream);

/* ----------------------------------------- vocabulary-parallel embedding
 *
 * A rank holds rows [v0, v0 + vl) of the token embedding wte [V, C]. */

/* out[n, C] = wte row of ids[i] when this rank holds it, else 0; plus
 * wpe[i % T] when wpe is not NULL (one rank of the TP group adds it before
 * the sum over TP). ids: device. */
int nn_cuda_embedding_fwd(const int32_t *ids, int64_t n, const float *wte,
                          int v0, int vl, const float *wpe, int T, int C,
                          float *out, void *stream);

/* The backward's plan, made on the host from the ids: positions grouped by
 * the local row they update, in increasing position order (so the sums
 * run in the order nn_cpu's loop adds them, without atomics). */
typedef struct {
  int32_t *order;     /* [n]: positions, grouped */
  int32_t *seg_start; /* [segments + 1]: each group's range in order */
  int32_t *seg_row;   /* [segments]: its local row of wte */
  int segments;
  int32_t *row_work; /* [vl]: the sort's workspace */
} nn_embedding_plan;
/* Fills `plan` (host arrays of n, n + 1, n and vl entries) for ids[n]
 * (host). */
void nn_embedding_plan_make(const int32_t *ids, int64_t n, int v0, int vl,
                            nn_embedding_plan *plan);
/* dwte[seg_row] += sum of dout[pos] over the group (device arrays shaped as
 * the plan's). */
int nn_cuda_embedding_bwd(const int32_t *order, const int32_t *seg_start,
                          const int32_t *seg_row, int segments,
                          const float *dout, int C, float *dwte, void *stream);
/* dwpe[p, :] = sum over b of dx[b, p, :] for p < T (rows from T on are left
 * as they are). */
int nn_cuda_position_bwd(const float *dx, int B, int T, int C, float *dwpe,
                         void *stream);

/* ----------------------------------- vocabulary-parallel cross-entropy
 *
 * Logits [n, ld] with this rank's vl vocabulary columns [v0, v0 + vl).
 * Three steps around two sums over TP (Megatron's: only per-row scalars
 * move, never logits):
 *   stats: row_max[i] (this rank's), and into pair[2i] the sum of
 *          exp(z - row_max) and into pair[2i + 1] the target's logit
 *          (0 when another rank holds it);
 *   (the caller: global_max = allreduce MAX of row_max)
 *   rescale: pair[2i] *= exp(row_max - global_max)
 *   (the caller: allreduce SUM of pair)
 *   grad: z <- grad_scale * (softmax(z) - onehot(target)) in place, and
 *         row_loss[i] = log(sum) + global_max - target logit.
 * row_max and global_max may be the same buffer when TP is one rank (the
 * rescale is then skipped). */
int nn_cuda_xent_stats(const float *logits, int64_t ld, const int32_t *targets,
                       int64_t n, int v0, int vl, float *row_max, double *pair,
                       void *stream);
int nn_cuda_xent_rescale(const float *row_max, const float *global_max,
                         double *pair, int64_t n, void *stream);
int nn_cuda_xent_grad(float *logits, int64_t ld, const int32_t *targets,
                      int64_t n, int v0, int vl, const float *global_max,
                      const double *pair, float grad_scale, double *row_loss,
                      void *stream);
/* *out (device) = sum of x[n] (doubles), in a fixed order. */
int nn_cuda_sum_f64(const double *x, int64_t n, double *out, void *stream);

#ifdef __cplusplus
}
#endif
#endif
