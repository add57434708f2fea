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
  int d_in;     /* input features */
  int hidden;   /* H */
  int ffn;      /* F, the sharded dim; need not divide by tp_size */
  int classes;  /* C */
  int layers;   /* L */
} mlp_shape;

/* Parameters in registration order: inp.weight, inp.bias, then per block
 * norm.weight, norm.bias, fc1.weight, fc1.bias, fc2.weight, fc2.bias, then
 * head.weight, head.bias. */
enum { MLP_IN_W = 0, MLP_IN_B = 1 };
enum { BLK_LN_G = 0, BLK_LN_B, BLK_FC1_W, BLK_FC1_B, BLK_FC2_W, BLK_FC2_B,
       BLK_SLOTS };

/* Total number of parameter tensors: 4 + 6 L. */
int mlp_num_params(const mlp_shape *s);
/* Index of a block's parameter. */
int mlp_block_param(int layer, int slot);
/* Index of head.weight (head.bias follows). */
int mlp_head_param(const mlp_shape *s);
/* Name ("layers.3.fc1.weight"), global shape and ndim of parameter i. */
void mlp_param_info(const mlp_shape *s, int i, char *name, int len,
                    int *ndim, int64_t shape[2]);

/* Reduces `n` floats in place over the TP group (sum). */
typedef int (*mlp_allreduce_fn)(float *data, int64_t n, void *ctx);

/* One TP rank's view of the model: pointers to local parameter and gradient
 * storage (owned by the caller), the local slice [f_off, f_off + f_local)
 * of F, and activation buffers (owned here). */
typedef struct {
  mlp_shape s;
  int f_local;
  float **param;  /* [num_params] local data */
  float **grad;   /* [num_params] local gradients */
  int batch;      /* rows per forward */
  /* activations */
  float *x, *h;   /* h: [(L+1) B H] residual stream per layer */
  float *y, *mean, *rstd, *a, *g, *tmp, *logits, *dh, *dy, *da;
} mlp_model;

/* Local parameter shape of parameter i on a TP rank holding f_local rows of
 * F (colwise fc1 rows, rowwise fc2 columns). */
void mlp_local_shape(const mlp_shape *s, int f_local, int i, int *ndim,
                     int64_t shape[2]);

int mlp_model_init(mlp_model *m, const mlp_shape *s, int f_local, int batch,
                   float **param, float **grad);
void mlp_model_free(mlp_model *m);

/* Forward + backward on x [batch, d_in] with labels, gradients written
 * (overwritten) into m->grad. `loss_scale` divides the per-sample losses
 * (the global batch size for a mean over the global batch). Returns the sum
 * of this batch's losses (before scaling). `on_grad_ready(i, ctx)` is called
 * as soon as parameter i's gradient is final (reverse order), so a DP
 * reducer can start reducing while backward goes on. Times are added to
 * *compute_s and *tp_comm_s. Returns 0 or the allreduce's error. */
typedef int (*mlp_grad_ready_fn)(int param_index, void *ctx);
int mlp_forward_backward(mlp_model *m, const float *x, const int *labels,
                         float loss_scale, mlp_allreduce_fn allreduce,
                         void *ar_ctx, mlp_grad_ready_fn on_grad_ready,
                         void *gr_ctx, double *loss_sum, double *compute_s,
                         double *tp_comm_s);

/* Deterministic full-size initial values of parameter i (identical on every
 * rank for a given seed). */
void mlp_init_param(const mlp_shape *s, int i, uint64_t seed, float *out);

/* Synthetic data: a fixed random teacher network labels Gaussian inputs.
 * Writes the global batch of step `step`. */
void mlp_make_batch(const mlp_shape *s, uint64_t seed, int step, int batch,
                    float *x, int *labels);

/* AdamW on n elements (step counts from 1). */
void adamw_update(float *p, const float *g, float *m, float *v, int64_t n,
                  float lr, int step);

double mlp_now(void);

#endif
