// SPDX-License-Identifier: BSD-3-Clause
/* Vocabulary-parallel embedding and cross-entropy (Megatron), see
 * tpdp/tp.h: the embedding weight [V, D] is sharded on V over TP; a
 * lookup is masked by shard and allreduced; the loss over vocab-sharded
 * logits needs only per-row scalars from the other ranks (max, sum of
 * exponentials, target logit), never the [n, V] logits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tp/layout_internal.h"

tpdp_status tpdp_tp_parallelize_vocab(tpdp_module *emb, const tpdp_mesh *mesh,
                                      const char *tp_dim, tpdp_tp_fill_fn fill,
                                      void *fill_ctx) {
  TPDP_API_ENTRY;
  CHECK_PTR(emb);
  CHECK_PTR(mesh);
  CHECK_PTR(tp_dim);
  CHECK(tp_layout_check_modules(&emb, 1));
  int dim;
  tpdp_comm *comm;
  CHECK(tp_layout_resolve(mesh, tp_dim, &dim, &comm));
  char fqn[320], shape[96];
  tp_layout_param_fqn(emb, "weight", fqn, sizeof fqn);
  tpdp_param *w = tp_layout_find(emb, "weight");
  if (w == NULL)
    return TPDP_ERR(TPDP_ERR_NOT_FOUND, "module has no parameter '%s'", fqn);
  const tpdp_tensor *wt = tpdp_param_tensor(w);
  tpdp_shape_format(wt->ndim, wt->shape, shape, sizeof shape);
  if (wt->ndim != 2)
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "parameter '%s' must be an embedding weight [V, D], got %s",
                    fqn, shape);
  tp_layout_req req = {
      "weight", 2, {wt->shape[0], wt->shape[1]}, tpdp_shard(0)};
  tp_layout_state *st = NULL;
  CHECK(tp_layout_prepare(emb, TP_LAYOUT_VOCAB, &req, 1, mesh, dim, comm, fill,
                          fill_ctx, &st));
  st->total = wt->shape[0];
  tpdp_chunk_range(st->total, tpdp_comm_size(comm), tpdp_comm_rank(comm),
                   &st->first, &st->count);
  const char *suffix = " TP VOCAB";
  return tp_layout_commit(&emb, &st, &suffix, 1);
}

static tpdp_status vocab_state(const tpdp_module *emb, tp_layout_state **out) {
  return tp_layout_get(emb, TP_LAYOUT_VOCAB, "tpdp_tp_parallelize_vocab", out);
}

tpdp_status tpdp_tp_vocab_range(const tpdp_module *emb, int64_t *start,
                                int64_t *len, int64_t *vocab) {
  TPDP_API_ENTRY;
  tp_layout_state *st = NULL;
  CHECK(vocab_state(emb, &st));
  if (start) *start = st->first;
  if (len) *len = st->count;
  if (vocab) *vocab = st->total;
  return TPDP_SUCCESS;
}

/* A host contiguous tensor of `numel` elements, f32 (or also bf16 and f16
 * when `halves`), else an error naming `what`. */
static tpdp_status check_host(const tpdp_tensor *t, const char *what,
                              int64_t numel, int halves) {
  if (t->device.type != TPDP_DEVICE_CPU)
    return TPDP_ERR(TPDP_ERR_DEVICE_MISMATCH, "%s is not in host memory", what);
  int half = t->dtype == TPDP_BF16 || t->dtype == TPDP_F16;
  if (t->dtype != TPDP_F32 && !(halves && half))
    return TPDP_ERR(TPDP_ERR_DTYPE_MISMATCH, "%s is %s; expected f32%s", what,
                    tpdp_dtype_name(t->dtype), halves ? ", bf16 or f16" : "");
  if (!tpdp_tensor_is_contiguous(t))
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "%s is not contiguous", what);
  if (tpdp_tensor_numel(t) != numel)
    return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH,
                    "%s has %lld elements; expected %lld", what,
                    (long long)tpdp_tensor_numel(t), (long long)numel);
  return TPDP_SUCCESS;
}

static tpdp_status check_f32(const tpdp_tensor *t, const char *what,
                             int64_t numel) {
  return check_host(t, what, numel, 0);
}

/* Every id in [0, V), checked before any communication so that all TP
 * ranks (which see the same ids) fail alike. */
static tpdp_status check_ids(const int32_t *ids, int64_t n, int64_t vocab,
                             const char *what) {
  if (n < 0)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "negative count %lld",
                    (long long)n);
  if (n > 0 && ids == NULL)
    return TPDP_ERR(TPDP_ERR_NULL_POINTER, "argument '%s' is NULL", what);
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab)
      return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                      "%s[%lld] = %d is outside the vocabulary [0, %lld)", what,
                      (long long)i, (int)ids[i], (long long)vocab);
  return TPDP_SUCCESS;
}

/* What a lookup and its backward share: the state, the local weight
 * [count, D] (on the host: f32, or bf16/f16 as a fully sharded unit with
 * that param_dtype gathers it), the ids checked, and `act` (the [n, D] f32
 * activation: out, or grad_out) checked. */
static tpdp_status lookup_setup(const tpdp_module *emb, const int32_t *ids,
                                int64_t n, const tpdp_tensor *act,
                                const char *act_name, tp_layout_state **st,
                                const tpdp_tensor **weight) {
  CHECK_PTR(act);
  CHECK(vocab_state(emb, st));
  const tpdp_tensor *w = tpdp_param_tensor((*st)->entries[0].param);
  int64_t D = w->ndim == 2 ? w->shape[1] : 0;
  CHECK(check_host(w, "the local embedding weight", (*st)->count * D, 1));
  CHECK(check_ids(ids, n, (*st)->total, "ids"));
  CHECK(check_f32(act, act_name, n * D));
  *weight = w;
  return TPDP_SUCCESS;
}

tpdp_status tpdp_tp_vocab_embedding_forward(const tpdp_module *emb,
                                            const int32_t *ids, int64_t n,
                                            tpdp_tensor *out) {
  TPDP_API_ENTRY;
  tp_layout_state *st = NULL;
  const tpdp_tensor *w = NULL;
  CHECK(lookup_setup(emb, ids, n, out, "out", &st, &w));
  const int64_t D = w->shape[1];
  float *o = out->data;
  for (int64_t i = 0; i < n; i++) {
    int64_t r = (int64_t)ids[i] - st->first;
    float *oi = o + i * D;
    if (r < 0 || r >= st->count) {
      memset(oi, 0, sizeof(float) * (size_t)D);
    } else if (w->dtype == TPDP_F32) {
      memcpy(oi, (const float *)w->data + r * D, sizeof(float) * (size_t)D);
    } else { /* the row widened to f32 (exact) */
      const uint16_t *h = (const uint16_t *)w->data + r * D;
      for (int64_t k = 0; k < D; k++)
        oi[k] = w->dtype == TPDP_BF16 ? tpdp_bf16_to_f32(h[k])
                                      : tpdp_f16_to_f32(h[k]);
    }
  }
  if (n * D == 0) return TPDP_SUCCESS;
  return tpdp_allreduce(st->tp_comm, out, out, TPDP_OP_SUM);
}

tpdp_status tpdp_tp_vocab_embedding_backward(const tpdp_module *emb,
                                             const int32_t *ids, int64_t n,
                                             const tpdp_tensor *grad_out,
                                             tpdp_tensor *weight_grad) {
  TPDP_API_ENTRY;
  CHECK_PTR(weight_grad);
  tp_layout_state *st = NULL;
  const tpdp_tensor *w = NULL;
  CHECK(lookup_setup(emb, ids, n, grad_out, "grad_out", &st, &w));
  const int64_t D = w->shape[1];
  CHECK(check_f32(weight_grad, "weight_grad", st->count * D));
  const float *g = grad_out->data;
  float *dw = weight_grad->data;
  for (int64_t i = 0; i < n; i++) {
    int64_t r = (int64_t)ids[i] - st->first;
    if (r < 0 || r >= st->count) continue;
    float *row = dw + r * D;
    const float *gi = g + i * D;
    for (int64_t k = 0; k < D; k++) row[k] += gi[k];
  }
  return TPDP_SUCCESS;
}

tpdp_status tpdp_tp_vocab_cross_entropy(const tpdp_module *emb,
                                        tpdp_tensor *logits,
                                        const int32_t *targets, int64_t n,
                                        float grad_scale, double *loss_sum) {
  TPDP_API_ENTRY;
  CHECK_PTR(logits);
  CHECK_PTR(loss_sum);
  tp_layout_state *st = NULL;
  CHECK(vocab_state(emb, &st));
  CHECK(check_ids(targets, n, st->total, "targets"));
  const int64_t vl = st->count, v0 = st->first;
  CHECK(check_f32(logits, "logits", n * vl));
  if (n == 0) {
    *loss_sum = 0;
    return TPDP_SUCCESS;
  }
  float *mx = NULL;
  double *sums = NULL; /* per row: sum of exp(z - max), target logit */
  tpdp_status res = TPDP_SUCCESS;
  CHECK(TPDP_CALLOC(mx, (size_t)n));
  CHECK_GOTO(TPDP_CALLOC(sums, 2 * (size_t)n), res, done);
  float *Z = logits->data;
  for (int64_t i = 0; i < n; i++) {
    const float *z = Z + i * vl;
    float m = -INFINITY;
    for (int64_t j = 0; j < vl; j++) m = z[j] > m ? z[j] : m;
    mx[i] = m;
  }
  tpdp_tensor mt = tpdp_tensor_1d(mx, TPDP_F32, n);
  CHECK_GOTO(tpdp_allreduce(st->tp_comm, &mt, &mt, TPDP_OP_MAX), res, done);
  for (int64_t i = 0; i < n; i++) {
    float *z = Z + i * vl;
    int64_t t = (int64_t)targets[i] - v0;
    /* read before z turns into exponentials */
    sums[2 * i + 1] = t >= 0 && t < vl ? (double)z[t] : 0.0;
    const float m = mx[i];
    double s = 0;
    for (int64_t j = 0; j < vl; j++) {
      float e = expf(z[j] - m);
      z[j] = e;
      s += e;
    }
    sums[2 * i] = s;
  }
  tpdp_tensor stt = tpdp_tensor_1d(sums, TPDP_F64, 2 * n);
  CHECK_GOTO(tpdp_allreduce(st->tp_comm, &stt, &stt, TPDP_OP_SUM), res, done);
  double total = 0;
  for (int64_t i = 0; i < n; i++) {
    float *z = Z + i * vl;
    double S = sums[2 * i];
    total += log(S) + (double)mx[i] - sums[2 * i + 1];
    const float scale = (float)(grad_scale / S);
    for (int64_t j = 0; j < vl; j++) z[j] *= scale;
    int64_t t = (int64_t)targets[i] - v0;
    if (t >= 0 && t < vl) z[t] -= grad_scale;
  }
  *loss_sum = total;
done:
  free(mx);
  free(sums);
  return res;
}
