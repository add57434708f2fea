// SPDX-License-Identifier: BSD-3-Clause
/* Multi-head attention sharded by whole heads (tpdp/tp.h): the fused
 * q|k|v projection and the output projection as DTensors whose views put
 * the head index on a dim of its own, sharded over TP by torch.chunk, so
 * q, k and v of a head always live on one rank. */
#include <stdio.h>
#include <string.h>

#include "tp/layout_internal.h"

/* Shape checks of a projection's parameter, with the expected form. */
static tpdp_status bad_shape(const tpdp_module *m, const char *name,
                             const tpdp_tensor *t, const char *expected) {
  char fqn[320], have[96];
  tp_layout_param_fqn(m, name, fqn, sizeof fqn);
  tpdp_shape_format(t->ndim, t->shape, have, sizeof have);
  return TPDP_ERR(TPDP_ERR_SHAPE_MISMATCH, "parameter '%s' is %s; expected %s",
                  fqn, have, expected);
}

static tpdp_status need_weight(const tpdp_module *m, tpdp_param **out) {
  *out = tp_layout_find(m, "weight");
  if (*out != NULL) return TPDP_SUCCESS;
  char fqn[320];
  tp_layout_param_fqn(m, "weight", fqn, sizeof fqn);
  return TPDP_ERR(TPDP_ERR_NOT_FOUND, "module has no parameter '%s'", fqn);
}

tpdp_status tpdp_tp_parallelize_attention(
    tpdp_module *qkv, tpdp_module *out, int64_t n_head,
    tpdp_linear_layout layout, const tpdp_mesh *mesh, const char *tp_dim,
    tpdp_tp_fill_fn fill, void *fill_ctx) {
  TPDP_API_ENTRY;
  CHECK_PTR(qkv);
  CHECK_PTR(out);
  CHECK_PTR(mesh);
  CHECK_PTR(tp_dim);
  if (qkv == out)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT,
                    "the q|k|v and output projections are the same module");
  if (n_head < 1)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "n_head %lld must be >= 1",
                    (long long)n_head);
  if (layout != TPDP_LINEAR_OUT_IN && layout != TPDP_LINEAR_IN_OUT)
    return TPDP_ERR(TPDP_ERR_INVALID_ARGUMENT, "invalid linear layout %d",
                    (int)layout);
  tpdp_module *mods[2] = {qkv, out};
  CHECK(tp_layout_check_modules(mods, 2));
  int dim;
  tpdp_comm *comm;
  CHECK(tp_layout_resolve(mesh, tp_dim, &dim, &comm));
  const int io = layout == TPDP_LINEAR_IN_OUT;
  char expect[160];

  /* q|k|v: [in, 3E] (IN_OUT) or [3E, in] (OUT_IN), E = n_head * hd */
  tpdp_param *w = NULL;
  CHECK(need_weight(qkv, &w));
  const tpdp_tensor *wt = tpdp_param_tensor(w);
  int64_t fused = wt->ndim == 2 ? wt->shape[io ? 1 : 0] : 0;
  int64_t E = fused / 3, hd = E / n_head;
  snprintf(expect, sizeof expect,
           "a 2-D weight %s whose %s dim is 3 x %lld heads x head_dim",
           io ? "[in, 3E]" : "[3E, in]", io ? "last" : "first",
           (long long)n_head);
  if (wt->ndim != 2 || fused % 3 != 0 || E % n_head != 0 || hd == 0)
    return bad_shape(qkv, "weight", wt, expect);
  int64_t in = wt->shape[io ? 0 : 1];
  tp_layout_req qreq[2], oreq[2];
  int nq = 0, no = 0;
  if (io)
    qreq[nq++] =
        (tp_layout_req){"weight", 4, {in, 3, n_head, hd}, tpdp_shard(2)};
  else
    qreq[nq++] =
        (tp_layout_req){"weight", 4, {3, n_head, hd, in}, tpdp_shard(1)};
  tpdp_param *b = tp_layout_find(qkv, "bias");
  if (b != NULL) {
    const tpdp_tensor *bt = tpdp_param_tensor(b);
    snprintf(expect, sizeof expect, "a bias [%lld]", (long long)(3 * E));
    if (bt->ndim != 1 || bt->shape[0] != 3 * E)
      return bad_shape(qkv, "bias", bt, expect);
    qreq[nq++] = (tp_layout_req){"bias", 3, {3, n_head, hd}, tpdp_shard(1)};
  }

  /* output: [E, out] (IN_OUT) or [out, E] (OUT_IN), rowwise by heads */
  CHECK(need_weight(out, &w));
  wt = tpdp_param_tensor(w);
  snprintf(expect, sizeof expect, "a 2-D weight %s with %s = %lld",
           io ? "[E, out]" : "[out, E]", "E", (long long)E);
  if (wt->ndim != 2 || wt->shape[io ? 0 : 1] != E)
    return bad_shape(out, "weight", wt, expect);
  int64_t osize = wt->shape[io ? 1 : 0];
  if (io)
    oreq[no++] =
        (tp_layout_req){"weight", 3, {n_head, hd, osize}, tpdp_shard(0)};
  else
    oreq[no++] =
        (tp_layout_req){"weight", 3, {osize, n_head, hd}, tpdp_shard(1)};
  b = tp_layout_find(out, "bias");
  if (b != NULL) {
    const tpdp_tensor *bt = tpdp_param_tensor(b);
    snprintf(expect, sizeof expect, "a bias [%lld]", (long long)osize);
    if (bt->ndim != 1 || bt->shape[0] != osize)
      return bad_shape(out, "bias", bt, expect);
    oreq[no++] = (tp_layout_req){"bias", 1, {osize}, tpdp_replicate()};
  }

  tp_layout_state *st[2] = {NULL, NULL};
  CHECK(tp_layout_prepare(qkv, TP_LAYOUT_HEADS, qreq, nq, mesh, dim, comm, fill,
                          fill_ctx, &st[0]));
  tpdp_status res = tp_layout_prepare(out, TP_LAYOUT_HEADS, oreq, no, mesh, dim,
                                      comm, fill, fill_ctx, &st[1]);
  if (res != TPDP_SUCCESS) {
    tp_layout_state_free(st[0]);
    return res;
  }
  for (int i = 0; i < 2; i++) {
    tpdp_chunk_range(n_head, tpdp_comm_size(comm), tpdp_comm_rank(comm),
                     &st[i]->first, &st[i]->count);
    st[i]->total = n_head;
  }
  const char *suffix[2] = {" TP HEADS QKV", " TP HEADS OUT"};
  return tp_layout_commit(mods, st, suffix, 2);
}

tpdp_status tpdp_tp_attention_heads(const tpdp_module *m, int64_t *first,
                                    int64_t *count) {
  TPDP_API_ENTRY;
  CHECK_PTR(first);
  CHECK_PTR(count);
  tp_layout_state *st = NULL;
  CHECK(
      tp_layout_get(m, TP_LAYOUT_HEADS, "tpdp_tp_parallelize_attention", &st));
  *first = st->first;
  *count = st->count;
  return TPDP_SUCCESS;
}
