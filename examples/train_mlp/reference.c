// SPDX-License-Identifier: BSD-3-Clause
/* examples/train_mlp: --check's reference (see train.h). */
#include <stdlib.h>
#include <string.h>

#include "examples/train_mlp/train.h"

/* Trains the same model in this one process (tp = dp = 1, full batch):
 * per-step losses into ref_loss, final parameters into ref_params. With
 * --accum K each step trains on its K micro-batches as one batch of K times
 * the rows (the same mean gradient, reached without accumulating).
 *
 * With --param-dtype / --reduce-dtype it applies the units' casts instead:
 * each step the model computes on the parameters rounded to param_dtype,
 * on each dp rank's rows of each micro-batch apart; each rank's gradient
 * is rounded to param_dtype as it is added into its sum over the
 * micro-batches; the mean over ranks is taken as the units take it (each
 * rank's sum rounded to reduce_dtype, added in rank order in f32, divided
 * by dp, rounded to reduce_dtype once), then AdamW updates the f32
 * parameters. */
int train_reference(const options *o, const mlp_shape *s, double *ref_loss,
                    float **ref_params) {
  int np = mlp_num_params(s);
  const int mixed = o->param_dtype != TPDP_F32 || o->reduce_dtype != TPDP_F32;
  const int D = mixed ? o->dp : 1; /* dp ranks computed apart */
  float **grad = calloc((size_t)np, sizeof *grad);
  float **m1 = calloc((size_t)np, sizeof *m1),
        **m2 = calloc((size_t)np, sizeof *m2);
  float **cast = calloc((size_t)np, sizeof *cast);   /* rounded parameters */
  float **sum = calloc((size_t)np * D, sizeof *sum); /* [d * np + i] */
  int64_t *numel = calloc((size_t)np, sizeof *numel);
  const int K = o->accum, rows = o->batch * K;
  const int model_rows = mixed ? o->batch / D : rows;
  float *x = malloc(sizeof(float) * (size_t)rows * (size_t)s->d_in);
  int *labels = malloc(sizeof(int) * (size_t)rows);
  int rc = 1;
  mlp_model m;
  memset(&m, 0, sizeof m);
  if (!grad || !m1 || !m2 || !cast || !sum || !numel || !x || !labels)
    goto done;
  for (int i = 0; i < np; i++) {
    int ndim;
    int64_t shape[2];
    char name[64];
    mlp_param_info(s, i, name, sizeof name, &ndim, shape);
    numel[i] = ndim == 2 ? shape[0] * shape[1] : shape[0];
    grad[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    m1[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    m2[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    if (!grad[i] || !m1[i] || !m2[i]) goto done;
    mlp_init_param(s, i, o->seed, ref_params[i]);
    if (!mixed) continue;
    cast[i] = calloc((size_t)numel[i] + 1, sizeof(float));
    if (!cast[i]) goto done;
    for (int d = 0; d < D; d++) {
      sum[d * np + i] = calloc((size_t)numel[i] + 1, sizeof(float));
      if (!sum[d * np + i]) goto done;
    }
  }
  if (mlp_model_init(&m, s, s->ffn, model_rows, mixed ? cast : ref_params,
                     grad) != 0)
    goto done;
  const tpdp_dtype pdt = o->param_dtype, rdt = o->reduce_dtype;
  mlp_timers t = {0, 0};
  for (int step = 0; step < o->steps; step++) {
    for (int k = 0; k < K; k++)
      mlp_make_batch(s, o->seed, step * K + k, o->batch,
                     x + (size_t)k * o->batch * s->d_in,
                     labels + (size_t)k * o->batch);
    double loss = 0;
    if (!mixed) {
      mlp_forward(&m, x, labels, (float)rows, NULL, NULL, &loss, &t);
      mlp_backward(&m, NULL, NULL, NULL, NULL, &t);
    } else {
      for (int i = 0; i < np; i++)
        for (int64_t e = 0; e < numel[i]; e++) {
          cast[i][e] = ex_round_to(pdt, ref_params[i][e]);
          for (int d = 0; d < D; d++) sum[d * np + i][e] = 0;
        }
      for (int k = 0; k < K; k++)
        for (int d = 0; d < D; d++) {
          size_t row0 = (size_t)k * o->batch + (size_t)d * model_rows;
          double l = 0;
          mlp_forward(&m, x + row0 * s->d_in, labels + row0,
                      (float)model_rows * (float)K, NULL, NULL, &l, &t);
          mlp_backward(&m, NULL, NULL, NULL, NULL, &t);
          loss += l;
          for (int i = 0; i < np; i++)
            for (int64_t e = 0; e < numel[i]; e++)
              sum[d * np + i][e] =
                  ex_round_to(pdt, sum[d * np + i][e] + grad[i][e]);
        }
      for (int i = 0; i < np; i++)
        for (int64_t e = 0; e < numel[i]; e++) {
          float acc = 0;
          for (int d = 0; d < D; d++)
            acc += ex_round_to(rdt, sum[d * np + i][e]);
          grad[i][e] = ex_round_to(rdt, acc / (float)D);
        }
    }
    const nn_adamw_opts ao = mlp_adamw_opts(o);
    for (int i = 0; i < np; i++)
      nn_adamw(ref_params[i], grad[i], m1[i], m2[i], numel[i], &ao,
               MLP_WEIGHT_DECAY, step + 1);
    ref_loss[step] = loss / rows;
  }
  rc = 0;
done:
  mlp_model_free(&m);
  for (int i = 0; i < np && grad; i++) {
    free(grad[i]);
    if (m1) free(m1[i]);
    if (m2) free(m2[i]);
    if (cast) free(cast[i]);
    for (int d = 0; d < D && sum; d++) free(sum[d * np + i]);
  }
  free(grad);
  free(m1);
  free(m2);
  free(cast);
  free(sum);
  free(numel);
  free(x);
  free(labels);
  return rc;
}
