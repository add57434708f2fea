// SPDX-License-Identifier: BSD-3-Clause
/*
 * The residual MLP classifier of examples/train_mlp, written for one
 * tensor-parallel rank. With tp_size == 1 it is the plain single-process
 * model (the --check reference).
 *
 *   h0 = x W_in^T + b_in                                   [B, H]
 *   for each block l:  y = LayerNorm(h)                    (replicated)
 *                      a = y W1^T + b1      W1 [F, H]      colwise: rows of W1
 *                      g = GELU(a)                          and b1 sharded
 *                      z = allreduce_tp(g W2^T) + b2        rowwise: cols of W2
 *                      h = h + z                            sharded, b2 replicated
 *   logits = h W_out^T + b_out, loss = mean softmax cross-entropy
 *
 * Backward mirrors it; the gradient of y is partial over TP ranks (each
 * holds a slice of F) and is allreduced (the colwise input's backward).
 */
#ifndef TPDP_EXAMPLES_MLP_H
#define TPDP_EXAMPLES_MLP_H

#include <stdint.h>

typedef struct {
  int d_in;    /* input features */
  int hidden;  /* H */
  int ffn;     /* F, the sharded dim; need not divide by tp_size */
  int classes; /* C */
  int layers;  /* L */
} mlp_shape;

/* Parameters in registration order: inp.weight, inp.bias, then per block
 * norm.weight, norm.bias, fc1.weight, fc1.bias, fc2.weight, fc2.bias, then
 * head.weight, head.bias. */
enum { MLP_IN_W = 0, MLP_IN_B = 1 };
enum {
  BLK_LN_G = 0,
  BLK_LN_B,
  BLK_FC1_W,
  BLK_FC1_B,
  BLK_FC2_W,
  BLK_FC2_B,
  BLK_SLOTS
};

/* Total number of parameter tensors: 4 + 6 L. */
int mlp_num_params(const mlp_shape *s);
/* Index of a block's parameter. */
int mlp_block_param(int layer, int slot);
/* Index of head.weight (head.bias follows). */
int mlp_head_param(const mlp_shape *s);
/* Name ("layers.3.fc1.weight"), global shape and ndim of parameter i. */
void mlp_param_info(const mlp_shape *s, int i, char *name, int len, int *ndim,
                    int64_t shape[2]);

/* The two TP collectives of a block, in place over the TP group (sum):
 * MLP_TP_ROWWISE_OUT (forward, after fc2 of `layer`) and
 * MLP_TP_COLWISE_IN_GRAD (backward, the input gradient of fc1). */
enum { MLP_TP_ROWWISE_OUT = 0, MLP_TP_COLWISE_IN_GRAD = 1 };
typedef int (*mlp_allreduce_fn)(int kind, int layer, float *data, int64_t n,
                                void *ctx);

/* Called at the start and end of block `layer`'s forward and backward
 * (a framework's module hooks: fully sharded units gather the block's
 * parameters and reduce its gradients there, and the callee may re-point
 * param[]/grad[] at other memory). Returns 0, or nonzero to stop. */
enum {
  MLP_BLOCK_FORWARD_BEGIN = 0,
  MLP_BLOCK_FORWARD_END = 1,
  MLP_BLOCK_BACKWARD_BEGIN = 2,
  MLP_BLOCK_BACKWARD_END = 3
};
typedef int (*mlp_block_fn)(int event, int layer, void *ctx);

/* One TP rank's view of the model: pointers to local parameter and gradient
 * storage (owned by the caller), the local slice [f_off, f_off + f_local)
 * of F, and activation buffers (owned here). */
typedef struct {
  mlp_shape s;
  int f_local;
  float **param; /* [num_params] local data */
  float **grad;  /* [num_params] local gradients */
  int batch;     /* rows per forward */
  /* activations */
  float *x, *h; /* h: [(L+1) B H] residual stream per layer */
  float *y, *mean, *rstd, *a, *g, *tmp, *logits, *dh, *dy, *da;
  const int *labels;
  float loss_scale;
  int accumulate; /* the backward adds into grad[] (gradient accumulation) */
  mlp_block_fn block_fn; /* NULL: none (set after mlp_model_init) */
  void *block_ctx;
} mlp_model;

/* Local parameter shape of parameter i on a TP rank holding f_local rows of
 * F (colwise fc1 rows, rowwise fc2 columns). */
void mlp_local_shape(const mlp_shape *s, int f_local, int i, int *ndim,
                     int64_t shape[2]);

int mlp_model_init(mlp_model *m, const mlp_shape *s, int f_local, int batch,
                   float **param, float **grad);
void mlp_model_free(mlp_model *m);

/* Timers the model adds to (seconds). */
typedef struct {
  double compute; /* everything but the TP collectives and the callback */
  double tp_comm; /* inside the allreduce callback */
} mlp_timers;

/* Forward on x [batch, d_in] (copied) with labels; returns through
 * *loss_sum the sum of this batch's per-sample losses and leaves dlogits
 * (divided by loss_scale) for mlp_backward. Returns 0 or the callback's
 * error. */
int mlp_forward(mlp_model *m, const float *x, const int *labels,
                float loss_scale, mlp_allreduce_fn allreduce, void *ar_ctx,
                double *loss_sum, mlp_timers *t);

/* Backward after mlp_forward: gradients overwrite m->grad[i] (are added to
 * it with m->accumulate);
 * `on_grad_ready(i, ctx)` is called as soon as parameter i's gradient is
 * final (reverse order), so a DP reducer can start reducing while backward
 * goes on (its time is not counted in t). */
typedef int (*mlp_grad_ready_fn)(int param_index, void *ctx);
int mlp_backward(mlp_model *m, mlp_allreduce_fn allreduce, void *ar_ctx,
                 mlp_grad_ready_fn on_grad_ready, void *gr_ctx, mlp_timers *t);

/* Deterministic full-size initial values of parameter i (identical on every
 * rank for a given seed). */
void mlp_init_param(const mlp_shape *s, int i, uint64_t seed, float *out);

/* Synthetic data: a fixed random teacher network labels Gaussian inputs.
 * Writes the global batch of step `step`. */
void mlp_make_batch(const mlp_shape *s, uint64_t seed, int step, int batch,
                    float *x, int *labels);

double mlp_now(void);

#endif
